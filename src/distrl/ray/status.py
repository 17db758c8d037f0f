"""What Ray mode's workers are doing: each learner's and each worker's beside them (env, eval,
data workers, an algorithm's own) CPU, memory, GPU memory and work done, read live by ``distrl
status``; the driver samples the workers' beside the learners into the run dir's ``workers.jsonl``
(the learners' own are in the run's metrics, ``usage/rank<r>/*``).

Every worker beside the learners answers ``usage()`` in a concurrency group of its own, so it
answers while it steps envs, reads or evaluates. A learner trains on its actor's main thread and
cannot answer calls: it publishes its usage once per update (at most once a second) in Ray's
key-value store instead. That store, the actor states and the restart counts all live in Ray's
GCS, which needs no dashboard: distrl's local clusters run without one.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from distrl.ray.cluster import import_ray, join
from distrl.ray.placement import alive_nodes
from distrl.ray.workers import WorkRate, actor_restarts, usage_report, worker_failures

USAGE_GROUP = {"usage": 1}
"""The concurrency group ``usage()`` runs in, beside the worker's own calls."""
ANSWER_WITHIN_S = 5.0
"""A worker that does not answer ``usage()`` within this is shown as not answering."""


def remote_class(ray: Any, cls: type) -> Any:
    """``ray.remote(cls)`` with ``usage()`` in its own concurrency group."""
    method = ray.method(concurrency_group="usage")(cls.usage)
    return ray.remote(concurrency_groups=USAGE_GROUP)(type(cls.__name__, (cls,), {"usage": method}))


def sample(ray: Any, actors: dict[str, Any], reader: str) -> dict[str, dict[str, Any]]:
    """``usage(reader)`` of every named actor that answers within ``ANSWER_WITHIN_S``, by name,
    with its ``restarts`` (its deaths so far, Ray's actor table)."""
    from ray.exceptions import GetTimeoutError

    refs = {name: handle.usage.remote(reader) for name, handle in actors.items()}
    ray.wait(list(refs.values()), num_returns=len(refs), timeout=ANSWER_WITHIN_S)
    answers = {}
    for name, ref in refs.items():
        try:
            answers[name] = {**ray.get(ref, timeout=0), "restarts": actor_restarts(actors[name])}
        except (*worker_failures(), GetTimeoutError):
            continue
    return answers


LEARNER_KEY = "distrl-learner/"
"""A learner's entry in Ray's key-value store: this prefix and its actor name."""
PUBLISH_EVERY_S = 1.0
"""A learner publishes its usage at most this often: one GCS write, not one per fast update."""


class LearnerStatus:
    """A learner's ``runners.base.StatusBoard``: its usage in Ray's key-value store."""

    def __init__(self, namespace: str) -> None:
        import ray

        self.key = LEARNER_KEY + ray.get_runtime_context().get_actor_name()
        self.namespace = namespace
        self._last = -PUBLISH_EVERY_S
        self.samples = WorkRate()
        self.failed = False
        """A publish failed (said once)."""

    def publish(self, usage: dict[str, float], samples: int, collection: dict[str, float]) -> None:
        from ray.experimental.internal_kv import _internal_kv_put

        self.samples.add(samples - self.samples.done)
        now = time.monotonic()
        if now - self._last < PUBLISH_EVERY_S:
            return
        self._last = now
        report = {**usage_report(usage, self.samples, "samples"), "collection": collection}
        try:
            _internal_kv_put(self.key, json.dumps(report), namespace=self.namespace)
        except Exception as exc:  # whatever the GCS raises: live status must never stop training
            if not self.failed:
                print(f"distrl: live status not published ({exc}); training goes on", file=sys.stderr)
            self.failed = True


def learner_usage(names: list[str], namespace: str) -> dict[str, dict[str, Any]]:
    """The newest usage each named learner published, by name (none before its first update)."""
    from ray.experimental.internal_kv import _internal_kv_get

    answers = {}
    for name in names:
        if (report := _internal_kv_get(LEARNER_KEY + name, namespace=namespace)) is not None:
            answers[name] = json.loads(report)
    return answers


def forget_learners(job: str, namespace: str) -> None:
    """Remove every entry of ``job``'s learners, of every launch (a long-lived cluster would
    gather them)."""
    from ray.experimental.internal_kv import _internal_kv_del, _internal_kv_list

    for key in _internal_kv_list(LEARNER_KEY + job, namespace=namespace):
        _internal_kv_del(key, namespace=namespace)


class UsageLog:
    """The driver's record of every worker's usage: one JSON line per worker per sample."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, answers: dict[str, dict[str, Any]]) -> None:
        """Append ``answers``; a sample that cannot be written (the run dir being replaced by
        ``--overwrite`` at that moment) is skipped, never the run."""
        now = time.time()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as out:
                for name, usage in sorted(answers.items()):
                    out.write(json.dumps({"time": now, "worker": name, **usage}) + "\n")
        except OSError:
            return


def job_actors(ray: Any, namespace: str) -> list[dict[str, Any]]:
    """distrl's actors in ``namespace`` (alive ones, and dead ones of jobs still running), from
    Ray's actor table: name, group, state, restarts, node address, pid, cause of death."""
    from ray._private import state  # the GCS actor table: the state API would need the dashboard

    named = {
        a["name"] for a in ray.util.list_named_actors(all_namespaces=True) if a["namespace"] == namespace
    }
    rows = []
    for info in state.actors().values():
        name = info["Name"]
        parts = name.split("-")
        if parts[0] != "distrl" or len(parts) < 4 or (info["State"] != "DEAD" and name not in named):
            continue
        job, group = parts[1], parts[2]
        rows.append(
            {
                "job": job,
                "name": name,
                "group": group,
                "state": info["State"],
                "restarts": info["NumRestarts"],
                "node": info["Address"]["IPAddress"],
                "pid": info["Pid"],
                "death_cause": _death_line(info["DeathCause"]) if info["State"] == "DEAD" else "",
            }
        )
    alive_jobs = {row["job"] for row in rows if row["state"] != "DEAD"}
    return [row for row in rows if row["job"] in alive_jobs]


def _death_line(cause: Any) -> str:
    lines = [line.strip() for line in str(cause).splitlines() if "error_message" in line]
    return lines[0].split(":", 1)[1].strip().strip('"') if lines else ""


def resource_amount(resource: str, amount: float) -> str:
    """A Ray resource as a person reads it: Ray counts memory in bytes."""
    return f"{amount / 2**30:.1f} GiB" if resource == "memory" else f"{amount:g}"


def print_report(report: dict[str, Any]) -> None:
    """``distrl status``'s tables."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    cluster = Table(title=f"Ray cluster: {report['nodes']} alive node(s)")
    for column in ("resource", "available", "total"):
        cluster.add_column(column)
    for resource, (available, total) in report["resources"].items():
        cluster.add_row(resource, resource_amount(resource, available), resource_amount(resource, total))
    console.print(cluster)
    if not report["workers"]:
        console.print(f"no distrl job running in namespace {report['namespace']!r}")
    for job in sorted({worker["job"] for worker in report["workers"]}):
        table = Table(title=f"job distrl-{job}")
        columns = ("worker", "state", "restarts", "node", "pid", "CPU %", "RSS MB", "GPU MB", "work", "per s")
        for column in columns:
            table.add_column(column)
        for w in (worker for worker in report["workers"] if worker["job"] == job):
            answered = "rss_mb" in w
            state = w["state"]
            if state == "ALIVE" and not answered:  # a learner publishes nothing before its first update
                state += " (starting)" if w["group"] == "policy" else " (not answering)"
            if w["death_cause"]:
                state += f": {w['death_cause']}"
            table.add_row(
                w["name"],
                state,
                str(w["restarts"]),
                w["node"],
                str(w["pid"] or ""),
                f"{w['cpu_percent']:.0f}" if answered else "",
                f"{w['rss_mb']:.0f}" if answered else "",
                f"{w['gpu_mb']:.0f}" if answered else "",
                f"{w['work_done']} {w['work_unit']}" if answered and w["work_unit"] else "",
                f"{w['work_per_s']:.0f}" if answered and w["work_unit"] else "",
            )
        console.print(table)
        print_collection(console, job, [w for w in report["workers"] if w["job"] == job])


def print_collection(console: Any, job: str, workers: list[dict[str, Any]]) -> None:
    """The learners collecting ahead (``collect.lag``): the age of their last update's samples,
    segments dropped for their age, the segments their env workers had finished when they asked
    (the queue's depth), and their last update's seconds publishing weights and waiting for
    samples."""
    from rich.table import Table

    ahead = [w for w in workers if "sample_age" in w.get("collection", {})]
    if not ahead:
        return
    table = Table(title=f"job distrl-{job}: collecting ahead of the learners (last update)")
    table.add_column("learner", no_wrap=True)
    for column in ("age", "dropped", "queued", "update s", "publish s", "wait s"):
        table.add_column(column)
    for w in ahead:
        figures = w["collection"]
        waited = figures.get("time/collector_wait", figures.get("time/generate", 0.0))
        table.add_row(
            w["name"],
            f"{figures['sample_age']:g}",
            f"{figures.get('dropped_segments', 0.0):g}",
            f"{figures['queue_depth']:g}" if "queue_depth" in figures else "",
            f"{figures['time/update']:.3f}",
            f"{figures.get('time/publish', 0.0):.3f}",
            f"{waited:.3f}",
        )
    console.print(table)


def status(address: str, namespace: str, as_json: bool) -> int:
    """``distrl status``: the cluster's resources and the running jobs' workers, with state,
    restarts, node, CPU, memory, GPU memory and work done."""
    ray = import_ray()
    join(ray, address, namespace, log_to_driver=False)
    try:
        total, available = ray.cluster_resources(), ray.available_resources()
        workers = job_actors(ray, namespace)
        alive = {w["name"]: w["group"] for w in workers if w["state"] == "ALIVE"}
        # Learners cannot answer while they train: they publish their usage (``LearnerStatus``).
        learners = [name for name, group in alive.items() if group == "policy"]
        asked = [name for name, group in alive.items() if group != "policy"]
        usage = {
            **sample(ray, _handles(ray, asked, namespace), "status"),
            **learner_usage(learners, namespace),
        }
        for worker in workers:
            worker.update(usage.get(worker["name"], {}))
        report = {
            "namespace": namespace,
            "nodes": len(alive_nodes(ray)),
            "resources": {
                name: [available.get(name, 0.0), total.get(name, 0.0)] for name in ("CPU", "GPU", "memory")
            },
            "workers": workers,
        }
    finally:
        ray.shutdown()
    if as_json:
        print(json.dumps(report))
    else:
        print_report(report)
    return 0


def _handles(ray: Any, names: list[str], namespace: str) -> dict[str, Any]:
    """The named actors still there (a job may end between listing its actors and asking them)."""
    handles = {}
    for name in names:
        with contextlib.suppress(ValueError):
            handles[name] = ray.get_actor(name, namespace=namespace)
    return handles
