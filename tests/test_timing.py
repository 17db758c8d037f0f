"""Per-phase time in every update's metrics: the phases cover most of an update, the update's
time matches the wall clock; 2 ranks tell waiting for the slowest rank from the transfer, and
name the rank that collects slowest."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from distrl.algos.registry import algorithm
from distrl.timing import SHARED_PHASES, PhaseClock
from tests.helpers import CARTPOLE, distrl, train_ranks

TRAIN = [
    "--config",
    str(CARTPOLE),
    "--total-steps",
    "8192",
    "train.stop_return=null",
    "log.tensorboard=false",
]


def metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_phase_clock_adds_up_and_starts_over() -> None:
    clock = PhaseClock.for_algorithm(algorithm("dqn").config(name="dqn"))
    for _ in range(2):
        with clock("env"):
            time.sleep(0.01)
    with clock("replay"):  # DQN's own phase
        pass
    taken = clock.take()
    assert set(taken) == {*SHARED_PHASES, "replay", "data"}
    assert 0.02 <= taken["env"] < 0.5 and taken["backward"] == 0.0
    assert clock.take()["env"] == 0.0


def test_a_phase_the_algorithm_did_not_declare_is_a_bug() -> None:
    clock = PhaseClock.for_algorithm(algorithm("ppo").config())
    with pytest.raises(KeyError, match="generate"), clock("generate"):
        pass


@pytest.mark.slow
def test_phases_cover_an_update_and_match_the_wall_clock(tmp_path: Path) -> None:
    result = distrl("train", *TRAIN, "--run-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr
    rows = metrics(tmp_path)
    later = rows[1:]  # the first update also pays for warm-up, and logs only after its row
    for key in ("env", "inference", "returns", "forward", "backward", "optimizer", "log", "other"):
        assert all(f"time/{key}" in row for row in later), key
    # Each update's time is the wall time from one row to the next ...
    for before, row in zip(rows, later, strict=False):
        assert abs(row["time/update"] - (row["time_s"] - before["time_s"])) < 0.02 + 0.1 * row["time/update"]
    # ... and the named phases account for most of it.
    covered = sum(row["time/update"] - row["time/other"] for row in later) / sum(
        r["time/update"] for r in later
    )
    assert covered > 0.5


@pytest.mark.slow
def test_two_ranks_split_the_sync_and_name_the_slowest_rank(tmp_path: Path) -> None:
    result = train_ranks(2, *TRAIN, "--run-dir", str(tmp_path), "comm.time_sync_wait=true")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = metrics(tmp_path)
    assert all(row["time/sync_wait"] > 0 and row["time/sync_transfer"] > 0 for row in rows)
    assert all("time/sync" not in row for row in rows)
    # Each rank's own collection speed reached rank 0, the slowest one named.
    assert all(
        row["slowest_rank"] in (0, 1) and 0 < row["rank_sps_min"] <= row["rank_sps_max"] for row in rows
    )


def test_each_training_loop_times_on_a_clock_of_its_own(tmp_path: Path) -> None:
    """Two loops in one process: an update of one (collection, forward, backward, optimiser
    step) leaves the other's clock untouched."""
    import torch

    from distrl.comm import TorchComm
    from distrl.config.run import load_config
    from distrl.entry import build_training

    cfg = load_config(CARTPOLE, ["env.num_envs=4", "algo.rollout_steps=16", "log.tensorboard=false"])
    first, second = (build_training(cfg, TorchComm(), torch.device("cpu"), tmp_path / n) for n in "ab")
    first.runner.start(fresh=True)
    first.runner.iteration(0)
    mine, theirs = first.clock.take(), second.clock.take()
    assert mine["env"] > 0 and mine["forward"] > 0 and mine["backward"] > 0 and mine["optimizer"] > 0
    assert sum(theirs.values()) == 0.0
