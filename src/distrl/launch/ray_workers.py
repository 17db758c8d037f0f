"""How a learner finds the worker actors the Ray launcher started for it, and what the worker
groups share: ``RestartableWorkers`` (calls retried with backoff on a restarted worker),
``WorkerActor`` (what every worker actor answers: usage, work done, profile), one line on why an
actor failed.

The launcher names each learner's actors and hands the names over in ``WORKERS_VAR`` (JSON:
``namespace``, ``max_restarts``, ``backoff_s`` and a list of names per group); the learner looks
them up by name and wraps each group in the object its runner or loop uses.
"""

from __future__ import annotations

import json
import os
import sys
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distrl.errors import UserError

if TYPE_CHECKING:  # the runners import torch, which the Ray driver never needs
    from distrl.runners.base import RemoteWorkers

REBUILD_WAIT_S = 60.0
"""How long a failed worker may take to come back (Ray restarts it) before it counts as failed again."""
WORKERS_VAR = "DISTRL_RAY_WORKERS"
"""Set by the Ray launcher for each learner: JSON naming its worker actors, by group."""


def workers_env(namespace: str, max_restarts: int, backoff_s: float, **groups: list[str]) -> dict[str, str]:
    """The environment a learner gets: its namespace, and its groups' actor names (groups with
    none are left out)."""
    groups = {group: names for group, names in groups.items() if names}
    spec = {"namespace": namespace, "max_restarts": max_restarts, "backoff_s": backoff_s, **groups}
    return {WORKERS_VAR: json.dumps(spec)}


def from_launcher() -> RemoteWorkers:
    """The worker actors the Ray launcher gave this process (none outside Ray mode)."""
    from distrl.runners.base import RemoteWorkers

    spec = os.environ.get(WORKERS_VAR)
    if not spec:
        return RemoteWorkers()
    import ray

    from distrl.launch.ray_data_workers import RayDataWorkers
    from distrl.launch.ray_env_workers import RayEnvWorkers
    from distrl.launch.ray_eval_workers import RayEvalWorkers
    from distrl.launch.ray_status import LearnerStatus

    named = json.loads(spec)

    def handles(group: str) -> list[Any]:
        return [ray.get_actor(name, namespace=named["namespace"]) for name in named.get(group, [])]

    env, evaluation, data = handles("env"), handles("eval"), handles("data")
    retries = named["max_restarts"], named["backoff_s"]
    return RemoteWorkers(
        env=RayEnvWorkers(env, *retries) if env else None,
        eval=RayEvalWorkers(evaluation, *retries) if evaluation else None,
        data=RayDataWorkers(data, *retries) if data else None,
        status=LearnerStatus(named["namespace"]),
    )


def worker_failures() -> tuple[type[Exception], ...]:
    """What a call to a worker raises when the worker died or raised, or when the node that held
    its result was lost (imported only when a call failed: other runs never import Ray)."""
    from ray.exceptions import ObjectLostError, RayActorError, RayTaskError

    return (RayActorError, RayTaskError, ObjectLostError)


def raise_user_error(exc: Exception) -> None:
    """A worker that raised a UserError (bad input: no retry helps) is the user's one line."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, UserError):
        raise UserError(str(cause.args[0] if cause.args else cause)) from None


def failure_cause(exc: Exception) -> str:
    """One line on what Ray says killed the actor or failed the task."""
    lines = [line.strip() for line in str(getattr(exc, "cause", None) or exc).splitlines() if line.strip()]
    for line in lines:
        if "memory" in line.lower() or "killed" in line.lower() or "exit" in line.lower():
            return line
    return lines[-1] if lines else type(exc).__name__


def retry_delay(backoff_s: float, failures: int) -> float:
    """Exponential backoff: ``backoff_s`` before the first retry, doubled for each further one."""
    return backoff_s * 2 ** (failures - 1)


def report_failure(
    group: str, index: int, exc: Exception, failures: int, max_restarts: int, then: str
) -> None:
    """The one line a worker's failure gets on the learner's stderr."""
    print(
        f"distrl: {group} worker {index} failed ({failure_cause(exc)}); restart {failures} of at most "
        f"{max_restarts}, {then}",
        file=sys.stderr,
        flush=True,
    )


class RestartableWorkers(ABC):
    """Calls to one learner's group of restartable actors. A call that fails (the actor died and
    Ray restarts it, or it raised) is logged with its cause, waited out with exponential backoff,
    the worker set up again (``set_up``) and the call made again: the same work, whole, so none
    is lost or done twice. More than ``max_restarts`` failures in a row stop the run with one line."""

    group: str
    """The group's name in messages (``env``, ``data``)."""
    retried: str
    """What a retry does again, in messages."""

    def __init__(self, handles: list[Any], max_restarts: int, backoff_s: float) -> None:
        self.handles = handles
        self.max_restarts = max_restarts
        self.backoff_s = backoff_s
        self.failures = 0
        """Calls to a worker that failed (it died or raised) since the start."""
        self.rebuilds = 0
        """Times any worker was set up again (each rebuild of env workers gets fresh seeds)."""

    @abstractmethod
    def set_up(self, index: int, rebuild: int) -> None:
        """Bring worker ``index`` back to where the learner's calls expect it (``rebuild``: how
        many times any worker was set up again); raises Ray's errors while it restarts."""

    def call_all(self, method: str, *args: Any) -> list[Any]:
        """``method(*args)`` on every worker, retried as the class says."""
        return self.call_each(method, [args] * len(self.handles))

    def call_each(self, method: str, args: list[tuple[Any, ...]]) -> list[Any]:
        """``method(*args[i])`` on worker i, all at once, each retried as the class says."""
        refs = [getattr(h, method).remote(*a) for h, a in zip(self.handles, args, strict=True)]
        return [self.get(i, ref, method, *args[i]) for i, ref in enumerate(refs)]

    def call(self, index: int, method: str, *args: Any) -> Any:
        """``method(*args)`` on worker ``index``, retried."""
        return self.get(index, getattr(self.handles[index], method).remote(*args), method, *args)

    def get(self, index: int, ref: Any, method: str, *args: Any) -> Any:
        """The result of ``ref``, a call of ``method(*args)`` on worker ``index``, retried."""
        import ray

        failures = 0
        while True:
            try:
                if failures:
                    self._rebuild(index)
                    ref = getattr(self.handles[index], method).remote(*args)
                return ray.get(ref)
            except worker_failures() as exc:
                raise_user_error(exc)
                failures += 1
                self.failures += 1
                if failures > self.max_restarts:
                    raise UserError(
                        f"{self.group} worker {index} failed {failures} times in a row "
                        f"(workers.max_restarts={self.max_restarts}); last cause: {failure_cause(exc)}"
                    ) from None
                delay = retry_delay(self.backoff_s, failures)
                report_failure(
                    self.group,
                    index,
                    exc,
                    failures,
                    self.max_restarts,
                    f"retrying {self.retried} in {delay:g} s",
                )
                time.sleep(delay)

    def _rebuild(self, index: int) -> None:
        """``set_up`` once Ray has restarted the worker (calls fail while it restarts, for up to
        ``REBUILD_WAIT_S``); a failure past that counts as the worker's next failure."""
        from ray.exceptions import RayActorError

        self.rebuilds += 1
        deadline = time.monotonic() + REBUILD_WAIT_S
        while True:
            try:
                self.set_up(index, self.rebuilds)
                return
            except RayActorError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(self.backoff_s)


class WorkerActor:
    """What every env, eval and data worker actor class has: ``usage()`` (``distrl status``,
    the driver's ``workers.jsonl``), a count of the work it has done, and ``--profile``'s
    trace of its calls. (Learners are plain actors: ``usage()`` in a concurrency group of its own
    would move their training off the main thread, where signal handlers cannot be installed;
    they publish their usage instead (``ray_status.LearnerStatus``), and it is in the run's
    metrics too; their traces are in the run dir's ``profile/``.)"""

    work_unit = ""
    """What ``work_done`` counts (env steps, rows, episodes)."""

    def __init__(self, profile_calls: int = 0, profile_path: str = "") -> None:
        from distrl.io.profile import UpdateProfiler
        from distrl.usage import ProcessUsage

        self.work_done = 0
        self.profiler = UpdateProfiler(profile_calls, Path(profile_path))
        """Writes its trace after ``profile_calls`` calls that did work, past the first."""
        self.meter = ProcessUsage()

    def did(self, work: int) -> None:
        """A call's work is done: counted, and the profiler's step ended."""
        self.work_done += work
        self.profiler.step()

    def usage(self) -> dict[str, Any]:
        """``usage_report`` of this worker, its CPU share since the last call."""
        return usage_report(self.meter.read(), self.work_done, self.work_unit)


def usage_report(usage: dict[str, float], work_done: int, work_unit: str) -> dict[str, Any]:
    """What ``distrl status`` shows of a Ray process: its node address, pid, ``usage``
    (``usage.ProcessUsage.read``), uptime and the work done so far."""
    import psutil
    import ray

    process = psutil.Process()
    return {
        "node": ray.util.get_node_ip_address(),
        "pid": process.pid,
        **usage,
        "uptime_s": time.time() - process.create_time(),
        "work_done": work_done,
        "work_unit": work_unit,
    }
