"""Ray mode's evaluation workers on the session's real Ray head: rank 0 logs evaluations of the
newest weights made while training goes on, and an eval worker killed mid-run is restarted, its
evaluation retried and training never held up."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tests.ray_cluster import BUDGET, metrics_rows, ray_train_killing

STEPS_PER_UPDATE = 64
"""4 envs x the config's 16 rollout steps."""
UPDATES = 150
EVALUATING = [
    *BUDGET,
    "env.id=tests.envs.toy:PacedEnv",
    "env.max_episode_steps=16",
    "env.num_envs=4",
    "algo.minibatch_size=64",
    f"train.total_steps={STEPS_PER_UPDATE * UPDATES}",
    "workers.eval=1",
    "eval.every=1",
    "eval.episodes=4",
]
"""150 updates of an env whose steps sleep (25 s or so, mostly asleep: the test machine's cores
are left to other tests), each one's weights handed to the eval worker: time enough for the
killed worker to come back (a new process importing torch, seconds) and evaluate again."""


@pytest.mark.slow
def test_a_killed_eval_worker_never_stops_training(ray_head: str, tmp_path: Path) -> None:
    result, killed = ray_train_killing(ray_head, tmp_path, "eval", 3, *EVALUATING)
    assert result.returncode == 0, result.stderr[-3000:]
    assert killed, "the run ended before the worker could be killed"
    assert "Traceback" not in result.stderr
    rows = metrics_rows(tmp_path)
    every_update = [STEPS_PER_UPDATE * (i + 1) for i in range(UPDATES)]
    assert [row["global_step"] for row in rows] == every_update  # every update ran
    evaluated = [row for row in rows if "eval/return_mean" in row]
    assert evaluated, "no evaluation came back"
    for row in evaluated:
        assert math.isfinite(row["eval/return_mean"]) and row["eval/global_step"] <= row["global_step"]
    assert rows[-1]["eval_worker_failures"] == 1  # one kill, counted once
    assert "killed by ray.kill" in result.stderr  # the cause
    # The restarted worker evaluated again after the failure.
    assert any(row["eval_worker_failures"] >= 1 for row in evaluated)
    # Training went on while the worker was away (a new process importing torch: seconds): many
    # updates ran without a result, from the failure (a call that failed) or from the last result
    # before it (a restart noticed in the first result after it) to the first result after it.
    # Had rank 0 waited for the worker, there would be one or two.
    failed = next(i for i, row in enumerate(rows) if row["eval_worker_failures"] == 1)
    after = next(i for i, row in enumerate(rows) if i >= failed and "eval/return_mean" in row)
    away_from = failed
    if after == failed:  # noticed in a result
        away_from = max(i for i, row in enumerate(rows[:failed]) if "eval/return_mean" in row)
    assert after - away_from >= 5, (away_from, failed, after)
