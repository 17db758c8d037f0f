"""Rank 0's metrics sinks: metrics.jsonl, TensorBoard and the progress: a bar in a terminal, a
plain line every tenth of the budget when stdout is a file or pipe (no control codes in logs).

Other ranks get a logger with ``enabled=False`` that does nothing, so callers need no rank checks.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"
LEDGER_FILE = "ledger.jsonl"
"""One row per update of what it trained on, over all ranks (GRPO: the prompts' global indices):
what a test compares to show nothing was trained twice or left out, faults or not."""


def json_number(value: Any) -> Any:
    """NaN/inf are not JSON; write them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsLogger:
    def __init__(
        self,
        run_dir: Path,
        enabled: bool,
        tensorboard: bool,
        total_steps: int,
        progress: bool,
    ) -> None:
        self.enabled = enabled
        self.run_dir = run_dir
        self._file = None
        self._ledger = None
        self._tb = None
        self._progress = None
        self._total_steps = total_steps
        self._plain_tenths = 0
        """Tenths of the budget already reported by a plain line (stdout not a terminal)."""
        self._plain = progress and not sys.stdout.isatty()
        if not enabled:
            return
        # Held open for the whole run (line-buffered) and closed in close().
        self._file = open(run_dir / METRICS_FILE, "a", buffering=1)  # noqa: SIM115
        if tensorboard:
            from torch.utils.tensorboard.writer import FileWriter  # slow import: only when asked

            self._tb = FileWriter(str(run_dir / "tensorboard"))
        if progress and sys.stdout.isatty():
            from rich.progress import Progress

            self._progress = Progress(transient=True)
            self._progress.start()
            self._task = self._progress.add_task("training", total=total_steps)

    def log(self, row: dict[str, Any]) -> None:
        if not self.enabled:
            return
        self._file.write(json.dumps({k: json_number(v) for k, v in row.items()}) + "\n")
        step = int(row["global_step"])
        if self._tb is not None:
            self._tb.add_summary(_scalars_summary(row), step)
        if self._progress is not None:
            self._progress.update(self._task, completed=step, description=progress_label(row))
        tenths = min(10, step * 10 // max(self._total_steps, 1))
        if self._plain and tenths > self._plain_tenths:  # a line each time a tenth is passed
            self._plain_tenths = tenths
            label = progress_label(row)
            done = f"distrl: {step:,}/{self._total_steps:,} ({step / max(self._total_steps, 1):.0%})"
            print(done + (f" | {label}" if label else ""))

    def log_ledger(self, update: int, global_step: int, trained: list[int]) -> None:
        """The ledger's row of an update: what it trained on (``LEDGER_FILE``)."""
        if not self.enabled:
            return
        if self._ledger is None:
            self._ledger = open(self.run_dir / LEDGER_FILE, "a", buffering=1)  # noqa: SIM115
        self._ledger.write(
            json.dumps({"update": update, "global_step": global_step, "trained": trained}) + "\n"
        )

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
        if self._tb is not None:
            self._tb.close()
        for file in (self._file, self._ledger):
            if file is not None:
                file.close()


def progress_label(row: dict[str, Any]) -> str:
    """The progress bar's summary of an update: env steps per second, recent return and the share
    of the update spent in gradient sync (what is known of them)."""
    parts = []
    for key, shown in (
        ("sps", "{:,.0f} steps/s"),
        ("episode_return_mean", "return {:.1f}"),
        ("grad_sync_share", "sync {:.0%}"),
    ):
        value = row.get(key)
        if isinstance(value, int | float) and math.isfinite(value):
            parts.append(shown.format(value))
    return " | ".join(parts)


def _scalars_summary(row: dict[str, Any]):
    """All of a row's finite numbers as one TensorBoard event: a fraction of the cost of one
    event per scalar (``add_scalar``), which was ~3% of a CartPole update."""
    from tensorboard.compat.proto.summary_pb2 import Summary

    return Summary(
        value=[
            Summary.Value(tag=key, simple_value=float(value))
            for key, value in row.items()
            if isinstance(value, int | float) and math.isfinite(value) and key != "global_step"
        ]
    )


def truncate_metrics(run_dir: Path, last_step: int) -> None:
    """Drop the metrics' and the ledger's rows past ``last_step`` so a resumed run does not log
    the same update twice (a launch that died logged updates past its newest checkpoint)."""
    for name in (METRICS_FILE, LEDGER_FILE):
        path = run_dir / name
        if not path.is_file():
            continue
        rows = [line for line in path.read_text().splitlines() if line.strip()]
        kept = [line for line in rows if json.loads(line)["global_step"] <= last_step]
        path.write_text("".join(line + "\n" for line in kept))
