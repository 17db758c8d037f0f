import json
import math
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from distrl.io.metrics import METRICS_FILE, MetricsLogger, progress_label, truncate_metrics


def log_rows(run_dir: Path, rows: list[dict]) -> None:
    logger = MetricsLogger(run_dir, enabled=True, tensorboard=True, total_steps=100, progress=False)
    for row in rows:
        logger.log(row)
    logger.close()


ROWS = [
    {"global_step": 10, "episode_return_mean": 1.5, "sps": 100.0, "update": 1},
    {"global_step": 20, "episode_return_mean": math.nan, "sps": 120.0, "update": 2},
]


def test_every_finite_number_reaches_tensorboard_at_its_step(tmp_path: Path) -> None:
    log_rows(tmp_path, ROWS)
    events = EventAccumulator(str(tmp_path / "tensorboard"))
    events.Reload()
    assert sorted(events.Tags()["scalars"]) == ["episode_return_mean", "sps", "update"]
    assert [(e.step, e.value) for e in events.Scalars("sps")] == [(10, 100.0), (20, 120.0)]
    assert [e.step for e in events.Scalars("episode_return_mean")] == [10]  # NaN left out


def test_jsonl_writes_nan_as_null_and_truncation_drops_later_rows(tmp_path: Path) -> None:
    log_rows(tmp_path, ROWS)
    rows = [json.loads(line) for line in (tmp_path / METRICS_FILE).read_text().splitlines()]
    assert rows[1]["episode_return_mean"] is None
    truncate_metrics(tmp_path, last_step=10)
    rows = [json.loads(line) for line in (tmp_path / METRICS_FILE).read_text().splitlines()]
    assert [r["global_step"] for r in rows] == [10]


def test_disabled_logger_writes_nothing(tmp_path: Path) -> None:
    logger = MetricsLogger(tmp_path, enabled=False, tensorboard=True, total_steps=100, progress=False)
    logger.log(ROWS[0])
    logger.close()
    assert list(tmp_path.iterdir()) == []


def test_progress_label_summarises_speed_return_and_sync() -> None:
    row = {"sps": 12345.6, "episode_return_mean": 87.25, "grad_sync_share": 0.123, "global_step": 1}
    assert progress_label(row) == "12,346 steps/s | return 87.2 | sync 12%"
    assert progress_label({"sps": 10.0, "episode_return_mean": math.nan}) == "10 steps/s"


def test_progress_to_a_file_is_a_plain_line_per_tenth(tmp_path: Path, capsys) -> None:
    logger = MetricsLogger(tmp_path, enabled=True, tensorboard=False, total_steps=1000, progress=True)
    for step in range(50, 1001, 50):  # captured stdout is not a terminal
        logger.log({"global_step": step, "sps": 100.0})
    logger.close()
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "distrl: 100/1,000 (10%) | 100 steps/s"
    assert [line.split()[2] for line in lines] == [f"({p}%)" for p in range(10, 101, 10)]
    assert all("\x1b" not in line and "\r" not in line for line in lines)
