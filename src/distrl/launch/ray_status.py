"""What Ray mode's workers are doing: each env, eval and data worker's CPU, memory, GPU memory
and work done, read live by ``distrl status`` and sampled by the driver into the run dir's
``workers.jsonl`` (the learners' own are in the run's metrics, ``usage/rank<r>/*``).

Every such worker answers ``usage()`` in a concurrency group of its own, so it answers while it
steps envs, reads or evaluates. Actor states and restart counts come from Ray's actor table
(GCS), which needs no dashboard: distrl's local clusters run without one.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from distrl.launch.ray_workers import worker_failures

USAGE_GROUP = {"usage": 1}
"""The concurrency group ``usage()`` runs in, beside the worker's own calls."""
ANSWER_WITHIN_S = 5.0
"""A worker that does not answer ``usage()`` within this is shown as not answering."""


def remote_class(ray: Any, cls: type) -> Any:
    """``ray.remote(cls)`` with ``usage()`` in its own concurrency group."""
    method = ray.method(concurrency_group="usage")(cls.usage)
    return ray.remote(concurrency_groups=USAGE_GROUP)(type(cls.__name__, (cls,), {"usage": method}))


def sample(ray: Any, actors: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``usage()`` of every named actor that answers within ``ANSWER_WITHIN_S``, by name."""
    from ray.exceptions import GetTimeoutError

    refs = {name: handle.usage.remote() for name, handle in actors.items()}
    ray.wait(list(refs.values()), num_returns=len(refs), timeout=ANSWER_WITHIN_S)
    answers = {}
    for name, ref in refs.items():
        try:
            answers[name] = ray.get(ref, timeout=0)
        except (*worker_failures(), GetTimeoutError):
            continue
    return answers


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


def print_report(report: dict[str, Any]) -> None:
    """``distrl status``'s tables."""
    from rich.console import Console
    from rich.table import Table

    console = Console()
    cluster = Table(title=f"Ray cluster: {report['nodes']} alive node(s)")
    for column in ("resource", "available", "total"):
        cluster.add_column(column)
    for resource, (available, total) in report["resources"].items():
        cluster.add_row(resource, f"{available:g}", f"{total:g}")
    console.print(cluster)
    if not report["workers"]:
        console.print(f"no distrl job running in namespace {report['namespace']!r}")
    for job in sorted({worker["job"] for worker in report["workers"]}):
        table = Table(title=f"job distrl-{job}")
        columns = ("worker", "state", "restarts", "node", "pid", "CPU %", "RSS MB", "GPU MB", "work", "per s")
        for column in columns:
            table.add_column(column)
        for w in (worker for worker in report["workers"] if worker["job"] == job):
            # Learners are never asked (``ray_workers.WorkerActor``): only a worker can fail to answer.
            answered = "rss_mb" in w
            silent = w["state"] == "ALIVE" and not answered and w["group"] != "policy"
            state = "ALIVE (not answering)" if silent else w["state"]
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
                f"{w['work_done'] / max(w['uptime_s'], 1e-6):.0f}" if answered and w["work_unit"] else "",
            )
        console.print(table)
