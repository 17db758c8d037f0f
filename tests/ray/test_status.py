"""``distrl status`` against the session's real Ray head while a Ray-mode job runs: the cluster's
resources and every worker with its state, restarts and usage; the driver's samples of the
workers' usage in the run dir, beside the learners' own in the metrics; ``--profile``'s traces."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distrl.launch.preemption import PREEMPTED_EXIT_CODE
from distrl.ray.status import LEARNER_KEY, print_report, resource_amount
from tests.helpers import CARTPOLE, clean_env, distrl, run_python
from tests.ray_cluster import BUDGET, HEAD_CPUS, metrics_rows

LIST_LEARNER_ENTRIES = f"""
import ray, sys
import pytest
from ray.experimental.internal_kv import _internal_kv_list
ray.init(address=sys.argv[1], namespace="distrl", log_to_driver=False)
print(_internal_kv_list("{LEARNER_KEY}", namespace="distrl"))
"""
PROFILED = ["env", "env", "eval", "rank0.json"]
"""The traces ``--profile`` writes for the job below: its two env workers', eval worker's and learner's."""


@pytest.mark.slow
def test_status_shows_a_running_jobs_workers_and_the_run_records_their_usage(
    ray_head: str, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    job = subprocess.Popen(
        [sys.executable, "-m", "distrl", "train", "--config", str(CARTPOLE), "--launcher", "ray",
         "--ray-address", ray_head, "--run-dir", str(run_dir), "log.progress=false", "log.tensorboard=false",
         *BUDGET, "train.total_steps=61440", "workers.env=2", "workers.eval=1", "eval.every=1",
         "algo.name=appo", "collect.lag=1",
         "eval.episodes=2", "cluster.usage_every_s=0.5",
         "--profile", "2"],
        env=clean_env(), stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        # The learner publishes its first update at once (at sample age 0), then at most once a
        # second: wait for 1.5 s of updates, so that it has published a later one.
        while not (run_dir / "metrics.jsonl").exists() or training_s(run_dir) < 1.5:
            assert job.poll() is None, job.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "the job wrote no metrics"
            time.sleep(0.2)
        shown = distrl("status", "--ray-address", ray_head, "--json")
        assert shown.returncode == 0, shown.stderr[-3000:]
        # Shown, and --profile's traces written (each after two calls past the first): the rest
        # of the budget is not waited for, the learner is preempted (SIGTERM).
        traced_by = time.monotonic() + 60
        while len(list((run_dir / "profile").glob("*"))) < len(PROFILED) and time.monotonic() < traced_by:
            time.sleep(0.2)
        (learner_pid,) = (w["pid"] for w in json.loads(shown.stdout)["workers"] if w["group"] == "policy")
        os.kill(learner_pid, signal.SIGTERM)
        _, stderr = job.communicate(timeout=300)
    finally:
        job.kill()
    assert job.returncode == PREEMPTED_EXIT_CODE, stderr[-3000:]
    # The ended job's learner entries are gone from Ray's key-value store.
    listed = run_python("-c", LIST_LEARNER_ENTRIES, ray_head)
    assert listed.returncode == 0 and listed.stdout.strip() == "[]", listed.stderr[-3000:]
    report = json.loads(shown.stdout)
    assert report["nodes"] == 1 and report["resources"]["CPU"][1] == HEAD_CPUS
    workers = {worker["group"]: [] for worker in report["workers"]}
    for worker in report["workers"]:
        workers[worker["group"]].append(worker)
    assert sorted(workers) == ["env", "eval", "policy"]
    assert len(workers["env"]) == 2 and len(workers["policy"]) == 1
    assert all(w["state"] == "ALIVE" and w["restarts"] == 0 for group in workers.values() for w in group)
    for env_worker in workers["env"]:  # they answered while the job ran
        assert env_worker["work_unit"] == "env steps" and env_worker["work_done"] > 0
        assert 0 < env_worker["work_per_s"] <= env_worker["work_done"] / 0.1  # the recent rate
        assert env_worker["rss_mb"] > 0 and env_worker["pid"] > 0
    # The learner, busy training, published its own (at most once a second: at least one update
    # of 32 envs x 16 steps by then).
    (learner,) = workers["policy"]
    assert learner["work_unit"] == "samples" and learner["work_done"] >= 512 and learner["work_per_s"] > 0
    assert learner["rss_mb"] > 100 and learner["cpu_percent"] > 0 and learner["pid"] > 0
    # Its env workers run one segment ahead: its last update's samples were one update old.
    collection = learner["collection"]
    assert collection["sample_age"] == 1 and collection["time/publish"] > 0
    assert 0 <= collection["time/collector_wait"] < collection["time/update"]
    assert collection["queue_depth"] in (0, 1, 2)  # of the 2 segments sent ahead, those finished
    # The driver's samples of every worker, and the learner's own usage in the metrics.
    samples = [json.loads(line) for line in (run_dir / "workers.jsonl").read_text().splitlines()]
    assert {sample["worker"].split("-")[2] for sample in samples} == {"env", "eval"}
    assert all(sample["rss_mb"] > 0 for sample in samples)
    assert all(row["usage/rank0/rss_mb"] > 0 for row in metrics_rows(run_dir))
    # --profile 2: a Chrome trace of two updates of the learner and two calls of every worker.
    traces = sorted(
        path.name.split("-")[2] if "-" in path.name else path.name for path in (run_dir / "profile").iterdir()
    )
    assert traces == PROFILED
    for trace in (run_dir / "profile").iterdir():
        assert json.loads(trace.read_text())["traceEvents"]


def training_s(run_dir: Path) -> float:
    """Seconds between the first and the last metrics row."""
    rows = metrics_rows(run_dir)
    return rows[-1]["time_s"] - rows[0]["time_s"] if rows else 0.0


def test_learners_collecting_ahead_get_a_table_of_their_own(capsys: pytest.CaptureFixture[str]) -> None:
    learner = {
        "job": "abc", "name": "distrl-abc-policy-0", "group": "policy", "state": "ALIVE", "restarts": 0,
        "node": "127.0.0.1", "pid": 7, "death_cause": None,
        "collection": {"sample_age": 1.0, "queue_depth": 2.0, "time/update": 0.25, "time/publish": 0.002,
                       "time/generate": 0.05},
    }  # fmt: skip
    print_report({"namespace": "distrl", "nodes": 1, "resources": {}, "workers": [learner]})
    shown = capsys.readouterr().out
    assert "collecting ahead of the learners" in shown
    assert "distrl-abc-policy-0 │ 1   │ 0       │ 2      │ 0.250    │ 0.002     │ 0.050" in shown


def test_memory_is_shown_in_gib() -> None:
    assert resource_amount("memory", 1.75564e10) == "16.4 GiB"
    assert resource_amount("CPU", 4.0) == "4"
