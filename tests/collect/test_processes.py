"""Collector processes beside a rank (``collect.processes``, no Ray): at ``collect.lag: 0`` a
run trains exactly as the rank alone; at ``lag: 1`` every sample is one update old once learning
started, deterministically; with the newest weights, segments older than ``max_age`` are dropped
and counted; what acted is what the learner published; bad setups are one line."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from distrl.collect.ahead import Schedule
from distrl.collect.base import CollectRequest
from distrl.collect.processes import CollectorProcesses, LaggedCollection
from distrl.config.run import load_config
from distrl.models.actor_critic import ActorCritic
from distrl.models.policies import acting_modules, ppo_actor_critic
from tests.helpers import CARTPOLE, GRPO_REVERSE, children, clean_env, distrl, run_python
from tests.ray_cluster import metrics_rows, param_digests
from tests.reference_runs import QUIET, REFERENCE_RUNS, train


@pytest.mark.parametrize("name", sorted(REFERENCE_RUNS))
@pytest.mark.slow
def test_at_lag_0_processes_train_exactly_as_the_rank_alone(
    tmp_path: Path, name: str, reference_run: Callable[[str], Path]
) -> None:
    """...the rank alone: the session's reference run (``tests/reference_runs.py``)."""
    run = REFERENCE_RUNS[name]
    alone = metrics_rows(reference_run(name))
    beside = train(tmp_path / "beside", run.config, *run.overrides, f"collect.processes={run.collectors}")
    assert param_digests(tmp_path / "beside") == param_digests(reference_run(name))
    assert [row["sample_age"] for row in beside] == [0] * len(beside)
    assert [row["episode_return_mean"] for row in beside] == [row["episode_return_mean"] for row in alone]
    assert all(row.get("time/env", 0) == 0 and row["time/collector_wait"] > 0 for row in beside)


@pytest.mark.slow
def test_at_lag_1_every_sample_is_one_update_old_and_runs_repeat(
    tmp_path: Path, reference_run: Callable[[str], Path]
) -> None:
    config, budget = REFERENCE_RUNS["ppo"].config, REFERENCE_RUNS["ppo"].overrides
    lagged = [
        train(tmp_path / f"lagged{i}", config, *budget, "collect.processes=1", "collect.lag=1")
        for i in (1, 2)
    ]
    assert [row["sample_age"] for row in lagged[0]] == [0] + [1] * (len(lagged[0]) - 1)
    assert param_digests(tmp_path / "lagged1") == param_digests(tmp_path / "lagged2")
    # Lag 1 trains other weights than lockstep collection, which trains the rank alone's (lag 0).
    assert param_digests(tmp_path / "lagged1") != param_digests(reference_run("ppo"))


@pytest.mark.slow
def test_newest_weights_drop_and_count_old_segments_and_a_full_queues_oldest(tmp_path: Path) -> None:
    """At ``max_age: 0`` every segment a process started before the learner's last update is too
    old: at least one is dropped per update after the first, and the rest are trained on. A
    process whose full queue drops its oldest segments has them counted too."""
    config, budget = REFERENCE_RUNS["ppo"].config, REFERENCE_RUNS["ppo"].overrides
    rows = train(
        tmp_path, config, *budget, "collect.processes=1", "collect.weights=newest", "collect.max_age=0"
    )
    assert [row["sample_age"] for row in rows] == [0] * len(rows)
    assert rows[-1]["dropped_segments"] >= len(rows) - 1
    free = train(tmp_path / "free", config, *budget, "collect.processes=1", "collect.weights=newest")
    assert free[-1]["dropped_segments"] == 0
    # A process waits only for request 0 and for room in its queue of max(lag, 1) = 1 segment: the
    # one update u (from 0) takes was started once update u - 2 took its own, with those weights or
    # newer. It starts the next as it hands one over, before the learner's update: that one is older.
    ages = {row["update"] - 1: row["sample_age"] for row in free}
    assert all(age <= min(update, 2) for update, age in ages.items()) and max(ages.values()) > 0, ages
    # Dropping the oldest of a full queue: the process never waits, the learner counts its drops.
    # Small segments and long updates (30 epochs): the process fills its queue during each update.
    newest = ["collect.processes=1", "collect.weights=newest", "collect.queue_full=drop_oldest"]
    slow_learner = ["env.num_envs=8", "algo.rollout_steps=8", "algo.minibatch_size=32"]
    slow_learner.append("algo.update_epochs=30")
    dropping = train(tmp_path / "dropping", config, "train.total_steps=1024", *slow_learner, *newest)
    assert dropping[-1]["dropped_segments"] > len(dropping)
    assert [row["global_step"] for row in dropping] == list(range(64, 1025, 64))  # whole segments


@pytest.mark.slow
def test_what_acted_is_what_the_learner_published() -> None:
    """A segment's behaviour log-probabilities, from the process's copy, are the learner's own
    log-probabilities of those actions at the version it published (fp32, 1e-6)."""
    cfg = load_config(CARTPOLE, ["env.num_envs=4", "algo.rollout_steps=8"])
    processes = CollectorProcesses(count=2, schedule=Schedule(lag=0))
    observation_space, action_space = processes.start(cfg, [11, 12, 13, 14], [1, 0, 0, 1])
    policy = ppo_actor_critic(cfg, observation_space, action_space, torch.device("cpu"))
    collection = processes.acting(acting_modules(policy, None, None), torch.device("cpu"))
    try:
        collection.reset()
        for version in range(3):
            segment = collection.collect(CollectRequest(policy_version=version))
            assert segment.policy_version == version and segment.obs.shape[:2] == (8, 4)
            with torch.no_grad():
                log_probs, _, _ = policy.action_stats(
                    segment.obs.flatten(0, 1), segment.actions.flatten(0, 1)
                )
            torch.testing.assert_close(
                log_probs, segment.behaviour_log_probs.flatten(0, 1), rtol=0, atol=1e-6
            )
            with torch.no_grad():  # the next version: other weights, which the next segment must use
                for parameter in policy.parameters():
                    parameter.add_(0.1 * torch.randn_like(parameter))
    finally:
        started = [running.process for running in processes.running]
        collection.close()
    assert not any(process.is_alive() for process in started)


def started(schedule: Schedule) -> tuple[ActorCritic, LaggedCollection]:
    """One collector process over 4 CartPole envs, 8 steps a segment, its envs reset."""
    cfg = load_config(CARTPOLE, ["env.num_envs=4", "algo.rollout_steps=8"])
    processes = CollectorProcesses(count=1, schedule=schedule)
    observation_space, action_space = processes.start(cfg, [11, 12, 13, 14], [1, 0, 0, 1])
    policy = ppo_actor_critic(cfg, observation_space, action_space, torch.device("cpu"))
    collection = processes.acting(acting_modules(policy, None, None), torch.device("cpu"))
    collection.reset()
    return policy, collection


@pytest.mark.parametrize("drop_oldest", [False, True])
def test_a_full_queue_waits_for_the_learner_or_drops_its_oldest(drop_oldest: bool) -> None:
    """While the learner is away, a process with the newest weights fills its queue: then it
    waits, or writes over its oldest unread segments and goes on collecting. The learner counts
    what was written over (the gap in the segments' numbers), cuts the envs' episodes there, and
    never reads a slot being written: each segment it takes is one the process wrote whole (its
    log-probabilities are those of its observations and actions)."""
    policy, collection = started(Schedule(lag=1, newest=True, drop_oldest=drop_oldest))
    try:
        collection.collect(CollectRequest(policy_version=0))
        time.sleep(2.0)  # a segment of 4 envs x 8 steps takes milliseconds: the queue fills
        taken, figures = [], []
        for _ in range(20):
            taken.append(collection.collect(CollectRequest(policy_version=1)))
            figures.append(collection.figures())
        dropped = collection.counts()["dropped_segments"]
        last = collection.numbers[0]
    finally:
        collection.close()
    assert last == 21 + dropped  # every segment the process made was taken or counted, once
    assert figures[0]["queue_depth"] >= 1  # what the process had ready after the 2 s
    # Its share of time waiting for the learner, up to each segment taken.
    idle = [row["collector_idle_share"] for row in figures]
    if drop_oldest:
        assert dropped > 20  # hundreds in 2 s; a waiting process drops none
        assert bool(taken[0].restarted.all())  # its envs' episodes lost steps before it
        assert statistics.median(idle) < 0.5  # it went on collecting
    else:
        assert dropped == 0 and not bool(taken[0].restarted.any())
        assert max(idle[:4]) > 0.5  # it waited for the learner most of the 2 s (the segment after)
    for segment in taken:
        with torch.no_grad():
            log_probs, _, _ = policy.action_stats(segment.obs.flatten(0, 1), segment.actions.flatten(0, 1))
        torch.testing.assert_close(log_probs, segment.behaviour_log_probs.flatten(0, 1), rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["collect.lag=1"], "cartpole_ppo.yaml: collect.lag=1 needs collect.processes of 1 or more"),
        (["collect.weights=newest"], "collect.weights=newest needs collect.processes of 1 or more"),
        (["collect.lag=1", "workers.env=1"], "collect.lag=1 with collect.processes=0: env and generation"),
        (
            [
                "collect.lag=1",
                "workers.env=1",
                "collect.weights=newest",
                "collect.queue_full=drop_oldest",
                "--launcher",
                "ray",
            ],
            "collect.queue_full=drop_oldest with Ray env workers: they collect only the segments",
        ),
        (["collect.processes=1", "collect.lag=2", "collect.max_age=1"], "max_age=1 is below lag=2"),
        (["collect.processes=1", "collect.queue_full=drop_oldest"], "drop_oldest needs weights=newest"),
        (["collect.processes=2", "env.num_envs=1"], "collect.processes=2 for this rank's 1 envs"),
        (
            ["collect.processes=1", "train.straggler_threshold=0.5"],
            "train.straggler_threshold: collector processes",
        ),
        (["collect.processes=1", "--launcher", "ray"], "collect.processes=1: in Ray mode env workers"),
    ],
)
def test_bad_setups_are_one_line(tmp_path: Path, overrides: list[str], message: str) -> None:
    result = distrl("train", "--config", str(CARTPOLE), "--run-dir", str(tmp_path / "run"), *overrides)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_an_algorithm_without_env_collection_is_refused_in_one_line(tmp_path: Path) -> None:
    result = distrl("train", "--config", str(GRPO_REVERSE), "--run-dir", str(tmp_path), "collect.processes=1")
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "collector processes step envs" in lines[0], lines


def crashing(tmp_path: Path, crashes: int) -> list[str]:
    """A run whose collector process dies at its envs' 10th step (in its first segment of 16),
    ``crashes`` times in all."""
    return [
        "--env", "tests.envs.toy:CrashingEnv", f"env.kwargs.marker={tmp_path / 'crashed'}",
        "env.kwargs.crash_at=10", f"env.kwargs.crashes={crashes}", "env.num_envs=4", "algo.rollout_steps=16",
        "algo.minibatch_size=32", "--run-dir", str(tmp_path / "run"), *QUIET, "train.total_steps=4096",
        "collect.processes=1", "collect.lag=1",
    ]  # fmt: skip


@pytest.mark.slow
def test_a_process_that_dies_is_started_again_and_only_its_unfinished_segment_is_lost(tmp_path: Path) -> None:
    # It dies twice in a row (the restarted process's envs reach their 10th step too): within the limit.
    result = distrl("train", *crashing(tmp_path, crashes=2))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("distrl: collector process 0 ended (exit code 1); started again") == 2
    assert "restart 2 of at most 3 in a row" in result.stderr and "Traceback" not in result.stderr
    rows = metrics_rows(tmp_path / "run")
    assert rows[-1]["collector_restarts"] == 2
    # Every update trained on a whole segment: 64 updates of 64 samples, the budget exactly.
    assert [row["global_step"] for row in rows] == list(range(64, 4097, 64))


@pytest.mark.slow
def test_a_process_that_dies_more_than_max_restarts_stops_the_run_in_one_line(tmp_path: Path) -> None:
    result = distrl("train", *crashing(tmp_path, crashes=1), "collect.max_restarts=0")
    assert result.returncode == 2, result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        "distrl: error: collector process 0 ended (exit code 1): 1 failure in a row, more than "
        "collect.max_restarts=0"
    ]


@pytest.mark.slow
def test_a_learner_failing_before_training_ends_with_its_processes(tmp_path: Path) -> None:
    """The envs' first reset fails, before the training loop (and its closing of the collector)
    began: the learner still ends, its collector processes stopped at its exit (they are not
    daemons, and ``multiprocessing`` would wait for them)."""
    result = run_python(
        "-m", "distrl", "train", "--config", str(CARTPOLE), "--run-dir", str(tmp_path), *QUIET,
        "--env", "tests.envs.toy:FailingResetEnv", "collect.processes=1", timeout=120,
    )  # fmt: skip
    assert result.returncode == 1 and "a bug in the user's reset" in result.stderr


@pytest.mark.slow
def test_collector_processes_end_with_a_killed_learner(tmp_path: Path) -> None:
    learner = subprocess.Popen(
        [sys.executable, "-m", "distrl", "train", "--config", str(CARTPOLE), "--run-dir", str(tmp_path),
         *QUIET, "train.total_steps=100000000", "collect.processes=2", "collect.lag=1"],
        env=clean_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "metrics.jsonl").is_file() or not children(learner.pid):
            assert time.monotonic() < deadline and learner.poll() is None
            time.sleep(0.1)
        collectors = children(learner.pid)
    finally:
        learner.kill()
        learner.wait()
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in collectors) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(alive(pid) for pid in collectors), collectors


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"
