"""Ray mode's data workers on the session's real Ray head: offline DQN fed by data workers trains
exactly as a process reading the files itself, even when a data worker is killed mid-run (its
chunk is replayed whole), and several data workers per learner feed every row once an epoch."""

from __future__ import annotations

from pathlib import Path

import pytest

from distrl.config.run import load_config
from distrl.errors import UserError
from distrl.ray.driver import check_workers
from tests.helpers import CARTPOLE, OFFLINE, collect, distrl
from tests.ray_cluster import metrics_rows, param_digests, ray_train, ray_train_killing

OFFLINE_RUN = [
    "algo.batch_size=64", "algo.gradient_steps=30", "algo.target_update_interval=25",
    "train.stop_return=null", "train.total_steps=38400", "checkpoint.interval_steps=38400",
    "eval.cpe_every=0",
]  # fmt: skip
"""Iterations of 30 steps of 64 rows over 2500 logged rows (an epoch is 40 steps), 38,400 rows."""


@pytest.fixture(scope="module")
def logged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2500 random CartPole transitions in 4 files of 625 rows, collected once for this module's
    runs (which only read them)."""
    data = tmp_path_factory.mktemp("logged")
    collect(data, 2500, 625)
    return data


SHARES_LOGGED = pytest.mark.xdist_group("data-workers-logged")
"""On one pytest-xdist worker, so that ``logged`` is collected once."""


@SHARES_LOGGED
@pytest.mark.slow
def test_a_learner_fed_by_a_killed_data_worker_trains_as_one_reading_process(
    ray_head: str, tmp_path: Path, logged: Path
) -> None:
    data = f"data.path={logged}"
    result, killed = ray_train_killing(
        ray_head, tmp_path / "ray", "data", 4, data, "workers.data=1", *OFFLINE_RUN, config=OFFLINE
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert killed, "the run ended before the worker could be killed"
    assert "Traceback" not in result.stderr
    reference = distrl(
        "train", "--config", str(OFFLINE), "--run-dir", str(tmp_path / "local"), data, "log.progress=false",
        "log.tensorboard=false", *OFFLINE_RUN,
    )  # fmt: skip
    assert reference.returncode == 0, reference.stderr[-3000:]
    # The replayed chunk held the very rows of the lost one: the same steps as reading locally.
    assert param_digests(tmp_path / "ray") == param_digests(tmp_path / "local")
    ray_rows, local_rows = metrics_rows(tmp_path / "ray"), metrics_rows(tmp_path / "local")
    assert [row["global_step"] for row in ray_rows] == [row["global_step"] for row in local_rows]
    assert ray_rows[-1]["data_worker_failures"] == 1
    assert "killed by ray.kill" in result.stderr  # the cause


@SHARES_LOGGED
@pytest.mark.slow
def test_two_learners_with_two_data_workers_each_use_every_row_once_an_epoch(
    ray_head: str, tmp_path: Path, logged: Path
) -> None:
    # 4 files over 2 learners, each learner's 2 files over its 2 workers: 4 streams of 625 rows,
    # ceil(625 / 32) = 20 batches each, so an epoch is 40 steps of 2 x 32 rows = 2500 rows.
    result = ray_train(
        ray_head, tmp_path / "run", f"data.path={logged}", "workers.policy=2", "workers.data=4",
        "workers.cpus_per_data=0.5",
        "algo.batch_size=64", "algo.gradient_steps=40", "train.total_steps=5000", "train.stop_return=null",
        "eval.cpe_every=1", config=OFFLINE,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = metrics_rows(tmp_path / "run")
    assert [(row["global_step"], row["epoch"]) for row in rows] == [(2500, 0), (5000, 1)]
    assert "cpe/dr" in rows[-1]  # rank 0's counterfactual estimates, from rows a data worker read
    digests = param_digests(tmp_path / "run")
    assert len(digests) == 2 and digests[0] == digests[1]


@pytest.mark.parametrize(
    ("config", "overrides", "message"),
    [
        (CARTPOLE, ["workers.data=1"], "data workers read data.path for offline DQN"),
        (
            OFFLINE,
            ["data.path=x", "workers.policy=2", "workers.data=1"],
            "workers.data=1 is fewer than the 2",
        ),
    ],
    ids=["online", "fewer-than-learners"],
)
def test_data_workers_the_run_cannot_use_are_one_line(
    config: Path, overrides: list[str], message: str
) -> None:
    with pytest.raises(UserError, match=message):
        check_workers(load_config(config, overrides))
