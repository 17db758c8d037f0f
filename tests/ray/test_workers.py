"""Why a call to a Ray worker failed, read from Ray's own tables, for every way a worker ends:
on a real two-node Ray cluster of the test's own (``ray.cluster_utils.Cluster``, Ray's way to
run several nodes on one host), with a memory threshold just above what the machine uses, so
that Ray's memory monitor kills a worker that takes 3 GiB more."""

from __future__ import annotations

import json
import os
import tempfile

import pytest

from tests.helpers import clean_env, run_python

pytest.importorskip("ray", reason="the ray extra is installed by make test")

_CAUSES = """
import json, os, signal, sys, time

import ray
from ray._common.utils import get_system_memory
from ray._private.utils import get_used_memory
from ray.cluster_utils import Cluster

from distrl.ray.workers import actor_process, failure_cause

# Memory as Ray's memory monitor counts it (a container's cgroup where there is one): 3 GiB more
# than now is over the threshold, which leaves the cluster's own processes room.
total, used = get_system_memory(), get_used_memory()
if total - used < 14 * 2**30:
    print(json.dumps({"skip": f"{(total - used) / 2**30:.1f} GiB free: too little for the memory hog"}))
    sys.exit(0)
threshold = (used + 3 * 2**30) / total
cluster = Cluster(
    initialize_head=True,
    head_node_args={
        "num_cpus": 2, "include_dashboard": False, "temp_dir": os.path.join(sys.argv[1], "ray"),
        "_system_config": {"memory_usage_threshold": threshold, "memory_monitor_refresh_ms": 100},
    },
)
far = cluster.add_node(num_cpus=1, resources={"far": 1})
ray.init(address=cluster.address, log_to_driver=False)


@ray.remote(max_restarts=3, max_task_retries=0)
class Worker:
    def pid(self):
        return os.getpid()

    def sleep(self, seconds):
        time.sleep(seconds)

    def fail(self):
        raise ValueError("the env's state went bad")

    def hog(self):
        held = []
        for _ in range(40):  # 10 GiB at most, touched page by page
            held.append(bytearray(os.urandom(1)) * (256 * 2**20))
            time.sleep(0.05)


def cause(worker, call, meanwhile=lambda pid: None):
    pid = ray.get(worker.pid.remote())
    process = actor_process(worker)
    ref = call(worker)
    time.sleep(0.5)
    meanwhile(pid)
    try:
        ray.get(ref)
    except Exception as exc:
        return failure_cause(exc, process)
    return "no failure"


worker = Worker.remote()
causes = {
    "ray.kill": cause(worker, lambda w: w.sleep.remote(30), lambda pid: ray.kill(worker, no_restart=False)),
    "signal": cause(worker, lambda w: w.sleep.remote(30), lambda pid: os.kill(pid, signal.SIGKILL)),
    "exception": cause(worker, lambda w: w.fail.remote()),
    "out of memory": cause(worker, lambda w: w.hog.remote()),
}
remote = Worker.options(resources={"far": 1}).remote()
causes["node lost"] = cause(remote, lambda w: w.sleep.remote(30), lambda pid: cluster.remove_node(far))
print(json.dumps(causes))
ray.shutdown()
cluster.shutdown()
"""


@pytest.mark.slow
def test_every_way_a_worker_ends_is_named_from_rays_tables() -> None:
    with tempfile.TemporaryDirectory(prefix="distrl-ray-causes-") as temp:  # short: Ray's sockets
        # Ray's Cluster writes the head's address to $RAY_TMPDIR/ray/ray_current_cluster whatever
        # temp_dir it is given (/tmp/ray by default, which a fresh machine lacks): the head's
        # temp dir is that directory, so it exists.
        result = run_python("-c", _CAUSES, temp, timeout=300, env={**clean_env(), "RAY_TMPDIR": temp})
    assert result.returncode == 0, result.stderr[-3000:]
    causes = json.loads(result.stdout.strip().splitlines()[-1])
    if "skip" in causes:
        pytest.skip(causes["skip"])
    assert causes["ray.kill"] == "killed by ray.kill"
    assert causes["signal"].startswith("its process died (killed by a signal, the kernel's OOM killer")
    assert causes["exception"] == "it raised ValueError: the env's state went bad"
    assert causes["out of memory"].startswith("out of memory: Ray's memory monitor killed it")
    assert causes["node lost"].startswith("its node was lost")


_DEATHS = """
import json, os, signal, sys, time

import ray

from distrl.algos.registry import WorkerGroup
from distrl.ray.workers import READ_EVERY_S, RestartedByRay, Retries, StartedWorkers, actor_process

ray.init(address=sys.argv[1], namespace="deaths", log_to_driver=False)


@ray.remote(max_restarts=-1, max_task_retries=0)
class Worker:
    def __init__(self):
        self.task = None
        self.raised = False

    def start(self, task):
        self.task = task

    def pid(self):
        return os.getpid()

    def work(self, seconds):
        if self.task is None:
            raise RestartedByRay("its task")
        time.sleep(seconds)
        return self.task

    def fail_once(self):
        if not self.raised:
            self.raised = True
            raise ValueError("a flaky verifier")
        return "scored"


def killed_and_back(pid):
    os.kill(pid, signal.SIGKILL)
    while (process := actor_process(handle)) is None or process.pid == pid:  # Ray restarts it
        time.sleep(0.05)


class Probes(StartedWorkers):
    retried = "the call"


group = WorkerGroup("probe", "", "", "", False, "probe")
handle = Worker.remote()
workers = Probes(group, [handle], Retries(max_restarts=3, backoff_s=0.05, call_timeout_s=4.0))
workers.start_all("task")
counts = {"start": workers.counts()["probe_worker_failures"]}

# Mid-task: the call fails, is retried on the restarted worker (set up again) and succeeds.
pid = workers.call(0, "pid")
ref = handle.work.remote(30)
time.sleep(1.0)
os.kill(pid, signal.SIGKILL)
counts["mid-task result"] = workers.get(0, ref, "work", 0)  # retried without the wait
counts["mid-task"] = workers.counts()["probe_worker_failures"]

# Idle: Ray restarts it between two calls; the next call needs none of its state and succeeds,
# so no call of ours fails. Counted all the same.
killed_and_back(workers.call(0, "pid"))
counts["idle call"] = workers.call(0, "pid") > 0
time.sleep(READ_EVERY_S)  # counted within it
counts["idle"] = workers.counts()["probe_worker_failures"]

# A worker that raised and is kept: one failure, no death.
counts["raised result"] = workers.call(0, "fail_once")
counts["raised"] = workers.counts()["probe_worker_failures"]

# Hung: stopped mid-call, it never answers; past workers.call_timeout_s it is killed, restarted
# and its call made again, as a crashed one's.
pid = workers.call(0, "pid")
ref = handle.work.remote(2)
time.sleep(0.5)
os.kill(pid, signal.SIGSTOP)
started = time.monotonic()
counts["hung result"] = workers.get(0, ref, "work", 0)
counts["hung detected within the timeout"] = time.monotonic() - started < 4.0 + 10
counts["hung"] = workers.counts()["probe_worker_failures"]
print("counts", json.dumps(counts))
"""


@pytest.mark.slow
def test_every_worker_death_is_counted_whoever_noticed_it(ray_head: str) -> None:
    """A worker killed mid-call (the call fails and is retried), one killed while idle (Ray
    restarts it and no call of ours ever fails), one that raised, and one stopped mid-call (a
    hang, killed past the call timeout): four failures, each counted once."""
    result = run_python("-c", _DEATHS, ray_head, timeout=300, env=os.environ.copy())
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stderr.count("probe worker 0 failed") == 3, result.stderr[-3000:]  # not when idle
    assert "failed (no answer within workers.call_timeout_s=4 s: it hung (a stopped process" in result.stderr
    counts = json.loads(next(line for line in result.stdout.splitlines() if line.startswith("counts "))[7:])
    assert counts == {
        "start": 0,
        "mid-task result": "task",
        "mid-task": 1,
        "idle call": True,
        "idle": 2,
        "raised result": "scored",
        "raised": 3,
        "hung result": "task",
        "hung detected within the timeout": True,
        "hung": 4,
    }
