"""Ray mode's environment workers on the session's real Ray head: one learner with env workers
collects exactly what one process with the same envs collects (PPO, APPO, DQN, SAC), tagged with the
version of the weights they were sent, and a worker that dies mid-rollout is restarted, its part
collected again and the run finishes with every sample counted once."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from distrl.config.run import load_config
from distrl.errors import UserError
from distrl.ray.driver import check_workers
from tests.helpers import CARTPOLE, CARTPOLE_DQN, run_python
from tests.ray_cluster import (
    BUDGET,
    env_steps_by_worker,
    final_row,
    local_train,
    param_digests,
    ray_train,
    ray_train_killing,
)
from tests.reference_runs import QUIET, REFERENCE_RUNS

CRASHING = [
    "env.id=tests.envs.toy:CrashingEnv", "env.max_episode_steps=30", "env.num_envs=4",
    "algo.rollout_steps=16", "algo.minibatch_size=32", "train.total_steps=640", "train.stop_return=null",
    "workers.env=2", "workers.retry_backoff_s=0.1",
]  # fmt: skip


@pytest.mark.parametrize("name", sorted(REFERENCE_RUNS))  # A2C collects as PPO does
@pytest.mark.slow
def test_one_learner_with_env_workers_trains_exactly_as_one_process(
    ray_head: str, tmp_path: Path, name: str, reference_run: Callable[[str], Path]
) -> None:
    """...one process: the session's reference run (``tests/reference_runs.py``)."""
    run = REFERENCE_RUNS[name]
    workers = f"workers.env={run.collectors}"
    result = ray_train(ray_head, tmp_path / "ray", workers, *QUIET, *run.overrides, config=run.config)
    assert result.returncode == 0, result.stderr[-3000:]
    assert param_digests(tmp_path / "ray") == param_digests(reference_run(name))
    ray_row, local_row = final_row(tmp_path / "ray"), final_row(reference_run(name))
    assert ray_row["env_worker_failures"] == 0
    assert ray_row["episode_return_mean"] == local_row["episode_return_mean"]
    # The env workers stepped every env (each its equal part), for every update and no more.
    steps = ray_row["global_step"] // run.collectors
    assert env_steps_by_worker(tmp_path / "ray") == [steps] * run.collectors


_VERSIONS = """
import dataclasses, json, sys

import ray
import torch

from distrl.config.run_algorithm import runner_class
from distrl.comm import TorchComm
from distrl.config.run import load_config
from distrl.ray.cluster import worker_path
from distrl.ray.env_workers import EnvWorker, RayEnvWorkers
from distrl.ray.workers import Retries
from distrl.ray.groups import WORKER_GROUPS
from distrl.runners.base import RemoteWorkers, RunContext

address, runs = sys.argv[1], json.loads(sys.argv[2])
ray.init(address=address, log_to_driver=False, runtime_env={"env_vars": worker_path()})
handles = [ray.remote(EnvWorker).options(num_cpus=1).remote() for _ in range(2)]


def after_three_updates(cfg, workers):
    runner = runner_class(cfg)(RunContext(cfg, TorchComm(), torch.device("cpu"), workers=workers))
    runner.start(fresh=True)
    step = 0
    for _ in range(3):
        step += runner.iteration(step).env_steps
    # The segment the next iteration would collect.
    return runner.collect(runner.exploration(step)) if hasattr(runner, "exploration") else runner.collect()


def same(a, b):
    # Network outputs for 2 rows at a time may round differently in the last bit than for 4.
    if isinstance(a, torch.Tensor) and a.is_floating_point():
        return torch.allclose(a, b, rtol=0, atol=1e-6)
    return torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b


for config, overrides in runs.items():
    cfg = load_config(config, overrides)
    env_workers = RayEnvWorkers(WORKER_GROUPS["env"], handles, Retries(0, 0.1, 600.0))
    remote = after_three_updates(cfg, RemoteWorkers(groups={"env": env_workers}))
    local = after_three_updates(cfg, RemoteWorkers())
    names = [f.name for f in dataclasses.fields(remote)]
    differ = [n for n in names if not same(getattr(remote, n), getattr(local, n))]
    print(json.dumps({"versions": [remote.policy_version, local.policy_version], "differ": differ}))
"""


@pytest.mark.slow
def test_env_workers_tag_segments_with_the_version_they_were_sent(ray_head: str) -> None:
    """After 3 updates a learner's two env workers and its own envs both collect version 3, and
    the same samples, behaviour log-probabilities included."""
    small = ["env.num_envs=4", "algo.rollout_steps=8"]
    runs = {
        str(CARTPOLE): [*small, "algo.minibatch_size=16"],
        str(CARTPOLE_DQN): [*small, "algo.gradient_steps=2", "algo.learning_starts=0", "algo.batch_size=16"],
    }
    result = run_python("-c", _VERSIONS, ray_head, json.dumps(runs))
    assert result.returncode == 0, result.stderr[-3000:]
    found = [json.loads(line) for line in result.stdout.splitlines()]
    assert found == [{"versions": [3, 3], "differ": []}] * 2, found


@pytest.mark.slow
def test_env_workers_running_ahead_train_as_collector_processes_do(ray_head: str, tmp_path: Path) -> None:
    """At collect.lag=1 two env workers collect each segment with the weights of the update
    before, as two collector processes beside a rank do: the same schedule, the same weights."""
    appo = ["algo.name=appo", "collect.lag=1", *BUDGET]
    result = ray_train(ray_head, tmp_path / "ray", "workers.env=2", *appo)
    assert result.returncode == 0, result.stderr[-3000:]
    reference = local_train(tmp_path / "local", "collect.processes=2", *appo)
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert param_digests(tmp_path / "ray") == param_digests(tmp_path / "local")
    assert final_row(tmp_path / "ray")["sample_age"] == 1


@pytest.mark.parametrize("lag", [0, 1])
@pytest.mark.slow
def test_a_killed_env_worker_is_restarted_and_its_part_collected_again(
    ray_head: str, tmp_path: Path, lag: int
) -> None:
    # The only worker's process dies at its envs' 10th step: in its first rollout, and again in
    # the retry (at lag 1 with the next segment queued behind it, which is sent again).
    marker = tmp_path / "crashed"
    crashes = [f"env.kwargs.marker={marker}", "env.kwargs.crash_at=10", "env.kwargs.crashes=2"]
    result = ray_train(ray_head, tmp_path / "run", *CRASHING, *crashes, "workers.env=1", f"collect.lag={lag}")
    assert result.returncode == 0, result.stderr[-3000:]
    assert marker.exists() and marker.with_name("crashed.1").exists()
    assert "env worker 0 failed" in result.stderr or "env worker 1 failed" in result.stderr
    assert result.stderr.count("(its process died") == 2  # each failure's cause, from Ray's tables
    # The backoff doubles for a second failure in a row.
    assert "restart 1 of at most 3, retrying its part in 0.1 s" in result.stderr
    assert "restart 2 of at most 3, retrying its part in 0.2 s" in result.stderr
    assert "Traceback" not in result.stderr
    # Every update counted its 64 samples once: 10 updates, the budget exactly.
    final = final_row(tmp_path / "run")
    assert final["global_step"] == 640
    assert final["env_worker_failures"] == 2


@pytest.mark.slow
def test_ray_kill_of_an_env_worker_mid_run_does_not_stop_training(ray_head: str, tmp_path: Path) -> None:
    steps = "train.total_steps=8192"  # 16 updates of 512 steps
    result, killed = ray_train_killing(ray_head, tmp_path, "env", 3, "workers.env=2", *BUDGET, steps)
    assert result.returncode == 0, result.stderr[-3000:]
    assert killed, "the run ended before the worker could be killed"
    assert "Traceback" not in result.stderr
    final = final_row(tmp_path)
    assert final["global_step"] == 8192  # the killed worker's part was collected once, not lost
    assert final["env_worker_failures"] == 1
    assert "killed by ray.kill" in result.stderr  # the cause
    last = {row["worker"]: row for row in map(json.loads, (tmp_path / "workers.jsonl").open())}
    restarts = {name: row["restarts"] for name, row in last.items() if "-env-" in name}
    assert restarts.pop(killed.split()[0]) == 1  # the driver's record of the workers shows it too
    assert list(restarts.values()) == [0]


@pytest.mark.slow
def test_an_env_worker_out_of_restarts_is_one_line(ray_head: str, tmp_path: Path) -> None:
    marker = tmp_path / "crashed"
    result = ray_train(
        ray_head, tmp_path / "run", *CRASHING, f"env.kwargs.marker={marker}", "workers.max_restarts=0"
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "failed 1 times in a row (workers.max_restarts=0); last cause:" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("config", "overrides", "message"),
    [
        (CARTPOLE, ["workers.policy=2", "workers.env=1"], "workers.env=1 is fewer than the 2 learners"),
        (
            CARTPOLE_DQN,
            ["workers.env=2", "data.path=logged.parquet"],
            "env workers collect for online PPO and DQN with ml_framework: torch",
        ),
        (CARTPOLE, ["workers.env=2", "train.straggler_threshold=0.5"], "env workers always collect whole"),
    ],
    ids=["fewer-than-learners", "offline-dqn", "straggler-cutoff"],
)
def test_env_workers_the_run_cannot_use_are_one_line(
    config: Path, overrides: list[str], message: str
) -> None:
    with pytest.raises(UserError, match=message):
        check_workers(load_config(config, overrides))


@pytest.mark.slow
def test_env_workers_act_with_the_newest_weights_and_drop_what_is_too_old(
    ray_head: str, tmp_path: Path
) -> None:
    """``collect.weights: newest``: a worker reads the newest weights when it starts a segment, so
    the one it collects while the learner updates is a version old; at ``max_age: 0`` the learner
    drops it (at least one per update after the first), asks again and trains only on samples of
    its own weights."""
    newest = ["workers.env=2", "collect.weights=newest", *BUDGET]
    result = ray_train(ray_head, tmp_path / "bounded", *newest, "collect.max_age=0")
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "bounded" / "metrics.jsonl").read_text().splitlines()]
    assert [row["sample_age"] for row in rows] == [0] * len(rows)
    assert rows[-1]["dropped_segments"] >= len(rows) - 1
    result = ray_train(ray_head, tmp_path / "free", *newest)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "free" / "metrics.jsonl").read_text().splitlines()]
    assert "dropped_segments" not in rows[-1] and rows[-1]["global_step"] == 4096  # none can be
    assert max(row["sample_age"] for row in rows) == 1
