"""How a learner finds the worker actors the driver started for it, and what the worker
groups share: ``RestartableWorkers`` (calls retried with backoff on a restarted worker),
``WorkerActor`` (what every worker actor answers: usage, work done, profile), one line on why an
actor failed.

The driver names each learner's actors and hands the learner their names (``workers_spec``);
the learner looks them up by name and wraps each group in the object its runner or loop uses
(``ray.learners.remote_workers``).
"""

from __future__ import annotations

import contextlib
import logging
import math
import sys
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distrl.errors import UserError
from distrl.sharding import even_split

if TYPE_CHECKING:
    from distrl.algos.registry import WorkerGroup

REBUILD_WAIT_S = 60.0
"""How long a failed worker may take to come back (Ray restarts it) before it counts as failed again."""


@dataclass(frozen=True)
class Retries:
    """How a learner treats its workers' failures (``workers.max_restarts``,
    ``workers.retry_backoff_s``, ``workers.call_timeout_s``)."""

    max_restarts: int
    """Failures in a row a call may have before the run stops (eval workers: the evaluation is dropped)."""
    backoff_s: float
    """Wait before the first retry; doubled for each further one."""
    call_timeout_s: float
    """A call not answered within this is a hung worker (stopped, deadlocked, stuck): it is
    killed, restarted by Ray and its work done again, as a crashed one's."""


def workers_spec(namespace: str, retries: Retries, **groups: list[str]) -> dict[str, Any]:
    """What a learner is told of its worker actors: their namespace, the retry rules, and each
    group's actor names (groups with none left out)."""
    named = {group: names for group, names in groups.items() if names}
    return {"namespace": namespace, "retries": retries, "groups": named}


def worker_failures() -> tuple[type[Exception], ...]:
    """What a call to a worker raises when the worker died or raised, or when the node that held
    its result was lost (imported only when a call failed: other runs never import Ray)."""
    from ray.exceptions import ObjectLostError, RayActorError, RayTaskError

    return (RayActorError, RayTaskError, ObjectLostError)


def raise_user_error(exc: Exception) -> None:
    """A worker that raised a UserError (bad input: no retry helps) is the user's one line."""
    cause = getattr(exc, "cause", None)
    if isinstance(cause, UserError):
        raise UserError(str(cause.args[0] if cause.args else cause), code=cause.code) from None


@dataclass(frozen=True)
class ActorProcess:
    """The process of one incarnation of an actor: what Ray's tables say of it once it died is
    why the actor failed."""

    pid: int
    node_id: str
    """Ray's node id, hex."""


def actor_process(handle: Any) -> ActorProcess | None:
    """The process ``handle``'s actor runs in now (Ray's actor table); None while it has none, or
    when the table cannot be read (a cause is a nicety: it never fails a call)."""
    info = _actor_info(handle)
    if info is None or info.get("State") != "ALIVE" or not info.get("Pid"):
        return None
    return ActorProcess(int(info["Pid"]), info["Address"]["NodeID"])


def actor_restarts(handle: Any) -> int | None:
    """How often Ray has restarted ``handle``'s actor since it was created (each restart is one
    death of its process); None when the actor table cannot be read."""
    info = _actor_info(handle)
    return None if info is None else int(info.get("NumRestarts", 0))


def _actor_info(handle: Any) -> dict[str, Any] | None:
    import ray

    try:
        return ray._private.state.actors(actor_id=handle._actor_id.hex())
    except Exception as exc:  # whatever Ray's private API raises
        _unreadable("actor table", exc)
        return None


class RestartedByRay(RuntimeError):
    """What a worker raises when a call finds it restarted by Ray since it was set up: its
    process died, which its restart counts (``GroupFailures``), not the failed call again."""

    def __init__(self, lost: str) -> None:
        super().__init__(f"restarted by Ray (killed or out of memory), it lost {lost}")


def is_death(exc: Exception) -> bool:
    """A failed call whose cause is the death of the worker's process (or of its node, or its
    killing as hung), not an exception the worker raised."""
    from ray.exceptions import GetTimeoutError, ObjectLostError, RayActorError

    return isinstance(exc, RayActorError | ObjectLostError | GetTimeoutError) or isinstance(
        getattr(exc, "cause", None), RestartedByRay
    )


def killed_as_hung(handle: Any, timeout_s: float) -> str:
    """Kill a worker that did not answer within ``timeout_s`` (Ray restarts it, as after a crash);
    the cause, in one line."""
    import ray

    ray.kill(handle, no_restart=False)
    return (
        f"no answer within workers.call_timeout_s={timeout_s:g} s: it hung (a stopped process, a "
        "deadlock or a stuck call) and was killed for Ray to restart"
    )


READ_EVERY_S = 1.0
"""A group's failure count reads Ray's actor table at most this often (and after a failed call)."""


class GroupFailures:
    """A worker group's failures since the launch began: the calls in which a worker raised, plus
    its workers' deaths as Ray's actor table counts them (its restarts). So every death counts
    once, whoever noticed it: a call that failed with it, a set-up again that did, or none (Ray
    restarted an idle worker and the next call found it ready)."""

    def __init__(self, handles: list[Any]) -> None:
        self.handles = list(handles)
        self.raised = 0
        self.restarts_before = [actor_restarts(handle) or 0 for handle in self.handles]
        """Each worker's restarts before this launch (a learner launched again finds the job's
        workers as they are): the run's earlier launches counted those."""
        self.deaths = 0
        """Deaths since, as last read."""

        self.read_at = -math.inf
        """When the actor table was last read (monotonic)."""

    def failed(self, exc: Exception) -> None:
        if not is_death(exc):
            self.raised += 1
        self.read_at = -math.inf  # the next count reads the table again

    def count(self) -> int:
        """Failures so far. Ray's table is read at most every ``READ_EVERY_S`` (a GCS query per
        worker, ~1 ms: not every fast update), and after every failed call; a death no call
        noticed is counted within that. Unreadable, the deaths last read stand."""
        if time.monotonic() - self.read_at >= READ_EVERY_S:
            self.read_at = time.monotonic()
            restarts = [actor_restarts(handle) for handle in self.handles]
            if all(now is not None for now in restarts):
                pairs = zip(restarts, self.restarts_before, strict=True)
                self.deaths = sum(now - before for now, before in pairs)
        return self.raised + self.deaths


def failure_cause(exc: Exception, process: ActorProcess | None = None, wait_s: float = 1.0) -> str:
    """One line on why a call to an actor failed: why ``process`` (the actor's process when the
    call was made) ended — killed by ray.kill, out of memory, its node lost, or it died otherwise —
    or the exception the actor raised, or, without either, what Ray's error says. A process that
    just died may take Ray's tables up to ``wait_s`` to show."""
    from ray.exceptions import RayActorError, RayTaskError

    if process is not None:
        died = why_it_ended(process, wait_s if isinstance(exc, RayActorError) else 0.0)
        if died is not None:
            return died
    cause = getattr(exc, "cause", None)
    if isinstance(exc, RayTaskError) and isinstance(cause, Exception):
        message = str(cause).strip().splitlines()
        return f"it raised {type(cause).__name__}" + (f": {message[0]}" if message else "")
    lines = [line.strip() for line in str(cause or exc).splitlines() if line.strip()]
    for line in lines:
        if "memory" in line.lower() or "killed" in line.lower() or "exit" in line.lower():
            return line
    return lines[-1] if lines else type(exc).__name__


ERRORS_LOG = "errors.log"
"""In the run dir: the whole remote error (its traceback) of each actor failure said in one line."""


def record_error(run_dir: Path, what: str, exc: Exception) -> Path:
    """Append ``exc`` as Ray gives it (the remote traceback included) to the run dir's errors log,
    headed by ``what`` failed; the log's path, for the one line that says it."""
    log = run_dir / ERRORS_LOG
    with contextlib.suppress(OSError):  # the one line is said regardless
        run_dir.mkdir(parents=True, exist_ok=True)
        with log.open("a") as out:
            out.write(f"==== {time.strftime('%Y-%m-%d %H:%M:%S')} {what}\n{exc}\n\n")
    return log


def why_it_ended(process: ActorProcess, wait_s: float = 0.0) -> str | None:
    """Why Ray's node and worker tables say ``process`` ended; None while they show it alive (or
    not at all) after ``wait_s`` seconds, or when they cannot be read."""
    try:
        return _read_why_it_ended(process, wait_s)
    except Exception as exc:  # Ray's private tables: a cause is a nicety, never a new failure
        _unreadable("node and worker tables", exc)
        return None


_LOG = logging.getLogger(__name__)
_said_unreadable: set[str] = set()
"""Ray's tables that could not be read in this process, said once each (then logged at debug)."""


def _unreadable(table: str, exc: Exception) -> None:
    """What reading one of Ray's private tables raised: a warning the first time, a debug line
    after (a newer Ray may have moved them; failure causes then fall back to Ray's own error)."""
    level = logging.DEBUG if table in _said_unreadable else logging.WARNING
    _said_unreadable.add(table)
    _LOG.log(level, "distrl: Ray's %s could not be read (%s: %s)", table, type(exc).__name__, exc)


def _read_why_it_ended(process: ActorProcess, wait_s: float) -> str | None:
    import ray
    from ray.core.generated import common_pb2, gcs_pb2

    deadline = time.monotonic() + wait_s
    while True:
        if not any(node["NodeID"] == process.node_id and node["Alive"] for node in ray.nodes()):
            return f"its node was lost (Ray node {process.node_id[:8]})"
        for raw in ray._private.state.state._connect_and_get_accessor().get_worker_table():
            worker = gcs_pb2.WorkerTableData.FromString(raw)
            same = worker.pid == process.pid and worker.worker_address.node_id.hex() == process.node_id
            if same and not worker.is_alive:
                return _exit_cause(common_pb2.WorkerExitType.Name(worker.exit_type), worker.exit_detail)
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.1)


def _exit_cause(exit_type: str, detail: str) -> str:
    """One line for the way Ray says a worker process ended."""
    first = detail.split(". ")[0].strip().rstrip(".")
    if exit_type == "NODE_OUT_OF_MEMORY":
        return f"out of memory: Ray's memory monitor killed it ({first})"
    if "ray.kill" in detail:
        return "killed by ray.kill"
    if exit_type == "SYSTEM_ERROR":
        return (
            f"its process died (killed by a signal, the kernel's OOM killer, or a crash; Ray says: {first})"
        )
    return f"its process ended ({exit_type}: {first})"


def retry_delay(backoff_s: float, failures: int) -> float:
    """Exponential backoff: ``backoff_s`` before the first retry, doubled for each further one."""
    return backoff_s * 2 ** (failures - 1)


def report_failure(group: str, index: int, cause: str, failures: int, max_restarts: int, then: str) -> None:
    """The one line a worker's failure gets on the learner's stderr."""
    print(
        f"distrl: {group} worker {index} failed ({cause}); restart {failures} of at most "
        f"{max_restarts}, {then}",
        file=sys.stderr,
        flush=True,
    )


class RestartableWorkers(ABC):
    """Calls to one learner's group of restartable actors. A call that fails (the actor died and
    Ray restarts it, or it raised) is logged with its cause, waited out with exponential backoff,
    the worker set up again (``set_up``) and the call made again: the same work, whole, so none
    is lost or done twice. More than ``max_restarts`` failures in a row stop the run with one line."""

    retried: str
    """What a retry does again, in messages."""

    def __init__(self, group: WorkerGroup, handles: list[Any], retries: Retries) -> None:
        self.group = group
        """Its declaration: its name in messages, its metrics' names."""
        self.handles = handles
        self.retries = retries
        self.failures = GroupFailures(handles)
        self.rebuilds = 0
        """Times any worker was set up again (each rebuild of env workers gets fresh seeds)."""
        self.processes: dict[int, ActorProcess] = {}
        """Each worker's process as of its last call that worked: why it ended is a failure's cause."""

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
        from ray.exceptions import GetTimeoutError

        failures = 0
        while True:
            try:
                if failures:
                    self._rebuild(index)
                    ref = getattr(self.handles[index], method).remote(*args)
                result = ray.get(ref, timeout=self.retries.call_timeout_s)
                if index not in self.processes and (process := actor_process(self.handles[index])):
                    self.processes[index] = process
                return result
            except (*worker_failures(), GetTimeoutError) as exc:
                raise_user_error(exc)
                failures += 1
                self.failures.failed(exc)
                process = self.processes.pop(index, None)
                if isinstance(exc, GetTimeoutError):
                    cause = killed_as_hung(self.handles[index], self.retries.call_timeout_s)
                else:
                    cause = failure_cause(exc, process)
                if failures > self.retries.max_restarts:
                    raise UserError(
                        f"{self.group.name} worker {index} failed {failures} times in a row "
                        f"(workers.max_restarts={self.retries.max_restarts}); last cause: {cause}",
                        code="ray-worker-restarts-exhausted",
                    ) from None
                delay = retry_delay(self.retries.backoff_s, failures)
                then = f"retrying {self.retried} in {delay:g} s"
                report_failure(self.group.name, index, cause, failures, self.retries.max_restarts, then)
                time.sleep(delay)

    def send(self, method: str, args: list[tuple[Any, ...]]) -> QueuedCall:
        """``method(*args[i])`` on worker i, all at once, to be taken later (``take``): a worker
        runs its calls in the order they were sent, so several can wait on it."""
        refs = [getattr(h, method).remote(*a) for h, a in zip(self.handles, args, strict=True)]
        return QueuedCall(method, args, refs)

    def take(self, call: QueuedCall, later: Iterable[QueuedCall]) -> list[Any]:
        """The results of ``call``, each retried as the class says; a worker rebuilt on the way
        has its ``later`` calls sent again (a restarted worker lost what was queued on it, and a
        rebuilt one must run them after its rebuild)."""
        results = []
        for index, ref in enumerate(call.refs):
            rebuilds = self.rebuilds
            results.append(self.get(index, ref, call.method, *call.args[index]))
            if self.rebuilds != rebuilds:
                handle = self.handles[index]
                for queued in later:
                    queued.refs[index] = getattr(handle, queued.method).remote(*queued.args[index])
        return results

    def counts(self) -> dict[str, float]:
        """The workers' failures since the launch started (``IterationResult.counted``)."""
        return {self.group.failures_metric: float(self.failures.count())}

    def _rebuild(self, index: int) -> None:
        """``set_up`` once Ray has restarted the worker (calls fail while it restarts, for up to
        ``REBUILD_WAIT_S``); a failure past that counts as the worker's next failure."""
        from ray.exceptions import RayActorError

        self.rebuilds += 1
        deadline = time.monotonic() + REBUILD_WAIT_S
        while True:
            try:
                self.set_up(index, self.rebuilds)
                if process := actor_process(self.handles[index]):  # a failure in a row has its cause too
                    self.processes[index] = process
                return
            except RayActorError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(self.retries.backoff_s)


@dataclass
class QueuedCall:
    """A call sent to every worker of a group, its results to be taken later
    (``RestartableWorkers.send``)."""

    method: str
    args: list[tuple[Any, ...]]
    """Each worker's arguments."""
    refs: list[Any]
    """Each worker's result to come."""


class StartedWorkers(RestartableWorkers):
    """Workers whose whole state is what their ``start`` call gave them (reward functions, a
    prompt source): a restarted one is started again with the same arguments, and each call's
    items are cut into consecutive parts, one per worker."""

    def __init__(self, group: WorkerGroup, handles: list[Any], retries: Retries) -> None:
        super().__init__(group, handles, retries)
        self.start_args: tuple[Any, ...] = ()

    def start_all(self, *args: Any) -> None:
        self.start_args = args
        self.call_all("start", *args)

    def set_up(self, index: int, rebuild: int) -> None:
        import ray

        ray.get(self.handles[index].start.remote(*self.start_args))

    def parts(self, count: int) -> list[slice]:
        """``count`` items as consecutive parts, one per worker, differing by at most one."""
        splits = (even_split(count, i, len(self.handles)) for i in range(len(self.handles)))
        return [slice(first, first + size) for first, size in splits]


RATE_WINDOW_S = 10.0
"""A worker's work rate (``distrl status``'s "per s") covers about this many recent seconds."""


class WorkRate:
    """Work done per second over the last ``RATE_WINDOW_S`` or so: what a worker does now, not
    its average since it started."""

    def __init__(self) -> None:
        self.done = 0
        self._marks: deque[tuple[float, int]] = deque([(time.monotonic(), 0)])
        """(monotonic time, work done by then): the oldest at least the window ago once it can be."""

    def add(self, work: int) -> None:
        self.done += work
        now = time.monotonic()
        self._marks.append((now, self.done))
        while len(self._marks) > 2 and now - self._marks[1][0] >= RATE_WINDOW_S:
            self._marks.popleft()

    def per_s(self) -> float:
        since, done_then = self._marks[0]
        return (self.done - done_then) / max(time.monotonic() - since, 1e-6)


class WorkerActor:
    """What every worker actor class beside the learners has: ``usage()`` (``distrl status``,
    the driver's ``workers.jsonl``), a count of the work it has done, and ``--profile``'s
    trace of its calls. (Learners are plain actors: ``usage()`` in a concurrency group of its own
    would move their training off the main thread, where signal handlers cannot be installed;
    they publish their usage instead (``ray.status.LearnerStatus``), and it is in the run's
    metrics too; their traces are in the run dir's ``profile/``.)"""

    work_unit = ""
    """What ``work_done`` counts (env steps, rows, episodes)."""

    def __init__(self, profile_calls: int = 0, profile_path: str = "") -> None:
        from distrl.io.profile import UpdateProfiler

        self.work = WorkRate()
        self.profiler = UpdateProfiler(profile_calls, Path(profile_path))
        """Writes its trace after ``profile_calls`` calls that did work, past the first."""
        self.meters: dict[str, Any] = {}
        """A CPU meter per reader (the driver's samples, ``distrl status``): one reader's reading
        does not shorten another's window."""

    def did(self, work: int) -> None:
        """A call's work is done: counted, and the profiler's step ended."""
        self.work.add(work)
        self.profiler.step()

    def usage(self, reader: str) -> dict[str, Any]:
        """``usage_report`` of this worker, its CPU share since ``reader``'s last call."""
        from distrl.usage import ProcessUsage

        if reader not in self.meters:
            self.meters[reader] = ProcessUsage()
        return usage_report(self.meters[reader].read(), self.work, self.work_unit)


def usage_report(usage: dict[str, float], work: WorkRate, work_unit: str) -> dict[str, Any]:
    """What ``distrl status`` shows of a Ray process: its node address, pid, ``usage``
    (``usage.ProcessUsage.read``), uptime, the work done so far and its recent rate."""
    import psutil
    import ray

    process = psutil.Process()
    return {
        "node": ray.util.get_node_ip_address(),
        "pid": process.pid,
        **usage,
        "uptime_s": time.time() - process.create_time(),
        "work_done": work.done,
        "work_per_s": work.per_s(),
        "work_unit": work_unit,
    }
