"""Ray mode's evaluation workers: actors that play deterministic episodes with a snapshot of the
newest weights while the learners go on training.

Rank 0's loop submits a snapshot every ``eval.every`` updates and collects finished results once
per update, never waiting: a snapshot goes to a free worker, or waits in a queue of one (a newer
snapshot replaces it). A worker that dies is restarted by Ray; its evaluation is retried (on it or
another worker) with exponential backoff, at most ``workers.max_restarts`` times in a row, and
the failure is logged with its cause and counted (``eval_worker_failures``). Evaluation never
stops training: an evaluation out of retries is dropped with one line.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from distrl.errors import UserError
from distrl.io.train_state import SavedState
from distrl.ray.workers import (
    ActorProcess,
    GroupFailures,
    Retries,
    WorkerActor,
    actor_process,
    failure_cause,
    killed_as_hung,
    raise_user_error,
    report_failure,
    retry_delay,
    why_it_ended,
    worker_failures,
)

if TYPE_CHECKING:
    from distrl.algos.registry import WorkerGroup


class EvalWorker(WorkerActor):
    """The actor: rebuilds the snapshot's deterministic policy on its CPU and plays episodes."""

    work_unit = "episodes"

    def evaluate(self, policy: SavedState, episodes: int, seed: int) -> tuple[ActorProcess, list[float]]:
        """(this actor's process, which Ray replaces when it restarts the actor, the episodes' returns)."""
        import ray
        import torch

        from distrl.config.run_algorithm import evaluator
        from distrl.eval.policy import policy_from_saved

        torch.set_num_threads(1)
        cfg, actor = policy_from_saved(policy, "an evaluation snapshot")
        returns = evaluator(cfg)(cfg, actor, episodes, seed)
        self.did(episodes)
        return ActorProcess(os.getpid(), ray.get_runtime_context().get_node_id()), returns


@dataclass
class Evaluation:
    """One snapshot to evaluate, and how often it failed in a row."""

    policy: Any
    """The snapshot's object ref: put once, however often it is retried."""
    global_step: int
    episodes: int
    seed: int
    failures: int = 0
    not_before: float = 0.0
    """Monotonic time before which it is not retried (the backoff)."""


class Running(NamedTuple):
    """An evaluation a worker runs."""

    worker: int
    evaluation: Evaluation
    sent_at: float
    """When it was sent (monotonic): one running past ``workers.call_timeout_s`` hung."""


class RayEvalWorkers:
    """Rank 0's eval workers (``runners.base.EvalWorkers``)."""

    def __init__(self, group: WorkerGroup, handles: list[Any], retries: Retries) -> None:
        self.group = group
        """Its declaration: its name in messages, its metrics' names."""
        self.handles = handles
        self.retries = retries
        self.running: dict[Any, Running] = {}
        """A running evaluation's result ref -> where and when it runs."""
        self.queued: Evaluation | None = None
        self.failures = GroupFailures(handles)
        self.finished: list[tuple[Evaluation, list[float]]] = []
        self.processes: dict[int, ActorProcess] = {}
        """Each worker's process at its last evaluation: a restart between two calls is noticed,
        and why that process ended is a failure's cause."""
        self.coming_back: dict[Any, int] = {}
        """A failed worker's readiness probe -> the worker: it gets no evaluation until Ray has it
        back, so one failure is one failed call, however long the restart takes."""

    def submit(self, policy: SavedState, episodes: int, seed: int) -> None:
        import ray

        self.queued = Evaluation(ray.put(policy), policy.meta["global_step"], episodes, seed)
        self._dispatch()

    def results(self) -> dict[str, float]:
        import ray

        if self.running:
            done, waiting = ray.wait(list(self.running), num_returns=len(self.running), timeout=0)
            self._hung(waiting)
            for ref in done:
                index, evaluation, _ = self.running.pop(ref)
                try:
                    process, returns = ray.get(ref)
                except worker_failures() as exc:
                    self._failed(index, evaluation, exc)
                    continue
                self._check_process(index, process)
                self.finished.append((evaluation, returns))
        self._check_comebacks(ray)
        self._dispatch()
        row = {}
        if self.finished:  # the newest finished evaluation; older ones were superseded meanwhile
            evaluation, returns = max(self.finished, key=lambda done: done[0].global_step)
            row["eval/return_mean"] = sum(returns) / len(returns)
            row["eval/global_step"] = float(evaluation.global_step)
            self.finished = []
        return row

    def counts(self) -> dict[str, float]:
        return {self.group.failures_metric: float(self.failures.count())}

    def _check_comebacks(self, ray: Any) -> None:
        if not self.coming_back:
            return
        done, _ = ray.wait(list(self.coming_back), num_returns=len(self.coming_back), timeout=0)
        for ref in done:
            index = self.coming_back.pop(ref)
            try:
                ray.get(ref)
            except worker_failures():  # still restarting: ask again at the next update
                self.coming_back[self.handles[index].__ray_ready__.remote()] = index

    def _check_process(self, index: int, process: ActorProcess) -> None:
        """Say a restart that happened while the worker was idle (no call of ours failed; its
        death is counted as every death is, ``GroupFailures``)."""
        before = self.processes.setdefault(index, process)
        if before != process:
            cause = why_it_ended(before) or "Ray's tables do not say why"
            print(
                f"distrl: {self.group.name} worker {index} was restarted by Ray between evaluations "
                f"({cause})",
                file=sys.stderr,
                flush=True,
            )
        self.processes[index] = process

    def _hung(self, waiting: list[Any]) -> None:
        """Evaluations running past ``workers.call_timeout_s``: their workers fail as hung."""
        from ray.exceptions import GetTimeoutError

        now = time.monotonic()
        for ref in waiting:
            if now - self.running[ref].sent_at > self.retries.call_timeout_s:
                index, evaluation, _ = self.running.pop(ref)
                self._failed(
                    index, evaluation, GetTimeoutError(f"evaluation of step {evaluation.global_step}")
                )

    def _failed(self, index: int, evaluation: Evaluation, exc: Exception) -> None:
        from ray.exceptions import GetTimeoutError

        try:
            raise_user_error(exc)
        except UserError as bad_input:  # every evaluation would fail alike: stop evaluating
            print(f"distrl: evaluation during training stopped: {bad_input}", file=sys.stderr, flush=True)
            self.handles, self.queued = [], None
            return
        self.failures.failed(exc)
        # No waiting for Ray's tables: rank 0 trains.
        process = self.processes.pop(index, None)
        if isinstance(exc, GetTimeoutError):
            cause = killed_as_hung(self.handles[index], self.retries.call_timeout_s)
        else:
            cause = failure_cause(exc, process, wait_s=0.0)
        self.coming_back[self.handles[index].__ray_ready__.remote()] = index
        evaluation.failures += 1
        if evaluation.failures > self.retries.max_restarts:
            print(
                f"distrl: {self.group.name} worker {index} failed ({cause}); the evaluation of step "
                f"{evaluation.global_step} failed {evaluation.failures} times in a row "
                f"(workers.max_restarts={self.retries.max_restarts}) and is dropped; training goes on",
                file=sys.stderr,
                flush=True,
            )
            return
        queued = self.queued
        if queued is not None and queued.global_step >= evaluation.global_step:  # newer weights wait
            then = f"the evaluation of step {evaluation.global_step} gives way to step {queued.global_step}'s"
        else:
            delay = retry_delay(self.retries.backoff_s, evaluation.failures)
            then = f"retrying the evaluation of step {evaluation.global_step} in {delay:g} s"
            if queued is not None:
                then += f" (step {queued.global_step}'s, older, gives way)"
            evaluation.not_before = time.monotonic() + delay
            self.queued = evaluation
        report_failure(self.group.name, index, cause, evaluation.failures, self.retries.max_restarts, then)

    def _dispatch(self) -> None:
        """The queued evaluation to a free worker that is up."""
        if self.queued is None or time.monotonic() < self.queued.not_before:
            return
        busy = {running.worker for running in self.running.values()} | set(self.coming_back.values())
        free = [i for i in range(len(self.handles)) if i not in busy]
        if free:
            evaluation, self.queued = self.queued, None
            worker = self.handles[free[0]]
            if free[0] not in self.processes and (process := actor_process(worker)):
                self.processes[free[0]] = process  # a first evaluation's failure has its cause too
            ref = worker.evaluate.remote(evaluation.policy, evaluation.episodes, evaluation.seed)
            self.running[ref] = Running(free[0], evaluation, time.monotonic())
