"""Ray mode's environment workers: actors that each step a part of one learner's envs
(``collect.part.CollectorPart``: a CPU copy of what acts, refreshed from one object in Ray's object
store when the learner's policy version changes, never per step); the learner joins its workers'
segments along the env axis, so one learner with N env workers collects exactly what one process
with the same envs collects (with ``train.compile``, to the last bits of compiled acting: ~1e-5).

A worker that dies (killed, out of memory) is restarted by Ray; one whose env raised is kept (a
``UserError``, bad input, stops the run with its one line instead). Either way the learner logs
the cause, waits with exponential backoff, rebuilds the worker's envs
(fresh seeds) and collects that worker's part of the rollout again, giving up after
``workers.max_restarts`` failures in a row. A part is only ever taken whole, so no sample is lost
or counted twice.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace
from typing import Any

import gymnasium as gym
import torch

from distrl.algos.registry import WorkerGroup
from distrl.allocator import keep_freed_memory
from distrl.collect.ahead import Schedule, cut_episodes
from distrl.collect.base import CollectRequest, never
from distrl.collect.part import CollectorPart
from distrl.collect.weights import ActingWeights, PublishedWeights
from distrl.config.run import RunConfig
from distrl.errors import UserError
from distrl.ray.workers import (
    QueuedCall,
    RestartableWorkers,
    RestartedByRay,
    Retries,
    WorkerActor,
)
from distrl.sharding import even_split
from distrl.storage.segments import Segment
from distrl.timing import PhaseClock


class EnvWorker(WorkerActor):
    """The actor: a part of one learner's envs (``collect.part.CollectorPart``), stepped with a
    CPU copy of what acts for it (whatever the algorithm registers as its ``acting`` and
    ``collector``)."""

    work_unit = "env steps"

    def __init__(self, profile_calls: int = 0, profile_path: str = "") -> None:
        super().__init__(profile_calls, profile_path)
        keep_freed_memory()  # once per actor process: a rebuild after a failure needs it no more
        self.part: CollectorPart | None = None

    def start(
        self,
        cfg: RunConfig,
        seeds: list[int],
        noise_seed: list[int],
        noise_rows: int,
        first: int,
        generation: int = 0,
    ) -> tuple[gym.Space, gym.Space]:
        """Build the part's envs, acting copy and collector (as a rank builds its own)."""
        if self.part is not None:  # rebuilt after a failure: the old envs go first
            self.part.close()
        self.part = CollectorPart(cfg, seeds, noise_seed, noise_rows, first, generation)
        return self.part.spaces

    def reset(self) -> torch.Tensor:
        return self._live_part().reset()

    def collect(self, weights: ActingWeights, request: CollectRequest) -> Segment:
        """One segment of the worker's envs acting with ``weights``, tagged with their version."""
        segment = self._live_part().collect(weights, request)
        self.did(segment.steps * segment.obs.shape[1])
        return segment

    def collect_newest(self, board: Any) -> Segment:
        """``collect`` as the newest request on ``board`` (a ``NewestWeights`` actor) asks, when
        this segment starts; its weights fetched only when their version is new here."""
        import ray

        part = self._live_part()
        version, request, (weights_ref,) = ray.get(board.newest.remote())
        weights = ray.get(weights_ref) if version != part.version else ActingWeights(version, {})
        return self.collect(weights, request)

    def _live_part(self) -> CollectorPart:
        if self.part is None:  # Ray restarted this actor between two of the learner's calls
            raise RestartedByRay("its envs")
        return self.part


class RayEnvWorkers(RestartableWorkers):
    """A learner's env workers (``collect.base.EnvWorkers``)."""

    retried = "its part"

    def __init__(self, group: WorkerGroup, handles: list[Any], retries: Retries) -> None:
        super().__init__(group, handles, retries)
        self._start_args: list[tuple[Any, ...]] = []
        self.schedule = Schedule(lag=0)
        """How the workers collect ahead of the learner (``collect.*``)."""

    def start(self, cfg: RunConfig, seeds: list[int], noise_seed: list[int]) -> tuple[gym.Space, gym.Space]:

        if len(seeds) < len(self.handles):
            raise UserError(
                f"workers.env gives this learner {len(self.handles)} env workers for its {len(seeds)} envs; "
                f"every env worker needs at least one env (raise env.num_envs or lower workers.env)",
                code="ray-env-workers-exceed-envs",
            )
        self._start_args = []
        self.schedule = Schedule.of(cfg.collect)
        for i in range(len(self.handles)):
            first, count = even_split(len(seeds), i, len(self.handles))
            self._start_args.append((cfg, seeds[first : first + count], noise_seed, len(seeds), first))
        return self.call_each("start", self._start_args)[0]

    def acting(
        self, modules: dict[str, torch.nn.Module], device: torch.device, clock: PhaseClock | None = None
    ) -> RemoteCollection:
        return RemoteCollection(self, modules, device, self.schedule, clock)

    def set_up(self, index: int, rebuild: int) -> None:
        """Build and reset the worker's envs again, with fresh env seeds and noise per rebuild."""
        import ray

        handle = self.handles[index]
        ray.get(handle.start.remote(*self._start_args[index], generation=rebuild))
        ray.get(handle.reset.remote())


class NewestWeights:
    """The Ray actor through which a learner's env workers act with its newest weights
    (``collect.weights: newest``): the learner publishes each request with its weights (a
    reference into Ray's object store) and a worker reads the newest when it starts a segment."""

    def __init__(self) -> None:
        self.published: tuple[int, CollectRequest, list[Any]] | None = None

    def publish(self, version: int, request: CollectRequest, weights: list[Any]) -> None:
        """``weights``: a list holding the reference, so that Ray passes it on as it is."""
        self.published = (version, request, weights)

    def newest(self) -> tuple[int, CollectRequest, list[Any]]:
        assert self.published is not None, "a learner publishes before its first segment is sent"
        return self.published


class RemoteCollection:
    """A learner's env workers acting with the state of ``modules`` (by name) at each request's
    version: its collector (``collect.base.Collector``), rollouts or transitions alike, collecting
    ahead as ``schedule`` says (``collect.ahead``).

    With ``collect.lag: L`` the workers run ``L`` segments ahead: segment ``i`` acts as request
    ``max(i - L, 0)`` asked (collector processes' schedule, ``collect.processes``), so each request
    is answered by a segment already collected and leaves the next ones queued on the workers
    while the learner updates. With the newest weights a worker instead reads the newest request
    when it starts a segment (``NewestWeights``), and ``max(L, 1)`` segments stay asked for; the
    learner drops a segment more than ``collect.max_age`` updates old and asks for another. A
    worker that fails is rebuilt and its part collected again, its queued segments sent again:
    each part of each segment is taken whole, once."""

    def __init__(
        self,
        workers: RayEnvWorkers,
        modules: dict[str, torch.nn.Module],
        device: torch.device,
        schedule: Schedule,
        clock: PhaseClock | None = None,
    ) -> None:
        import ray

        self.workers = workers
        self.weights = PublishedWeights(modules, ray.put)
        """Each version's weights in Ray's object store, put once for all workers."""
        self.device = device
        self.schedule = schedule
        self.clock = clock or PhaseClock()
        self.queued: deque[QueuedCall] = deque()
        """Segments sent to the workers and not yet taken, oldest first."""
        self.queue_depth = 0
        """Segments every worker had finished when the learner asked for the last one."""
        self.dropped = 0
        """Segments dropped in this launch for being more than ``collect.max_age`` updates old."""
        self.board: Any = None
        """The ``NewestWeights`` actor the workers read (``collect.weights: newest``)."""
        if schedule.newest:
            self.board = ray.remote(num_cpus=0)(NewestWeights).remote()

    def reset(self) -> torch.Tensor:
        return torch.cat(self.workers.call_all("reset")).to(self.device)

    def collect(self, request: CollectRequest) -> Segment:
        """Every worker's part of the next segment, joined. Each request's weights are put in
        Ray's object store once for all workers as version ``request.policy_version``; parts are
        collected in full (``request.should_stop``, the straggler cut-off, is not applied to
        remote envs)."""
        import ray

        with self.clock("publish"):
            weights, _ = self.weights.publish(request.policy_version)
            request = replace(request, should_stop=never)
            workers = len(self.workers.handles)
            if self.board is None:  # segments up to index requests + lag act as this request asks
                call = ("collect", [(weights, request)] * workers)
            else:  # each segment as the newest request when it starts
                ray.get(self.board.publish.remote(request.policy_version, request, [weights]))
                call = ("collect_newest", [(self.board,)] * workers)
            self._ask_ahead(*call)
        self.queue_depth = sum(_finished(call) for call in self.queued)
        dropped = False
        with self.clock("collector_wait"):
            while True:
                parts = self.workers.take(self.queued.popleft(), self.queued)
                segment = type(parts[0]).join(parts, self.device)
                if not self.schedule.too_old(request.policy_version, segment.policy_version):
                    break
                self.dropped, dropped = self.dropped + 1, True
                self._ask_ahead(*call)
        return cut_episodes(segment) if dropped else segment

    def _ask_ahead(self, method: str, args: list[tuple[Any, ...]]) -> None:
        """Keep the schedule's segments asked for beyond the one the learner takes next, each as
        ``method(*args[i])`` on worker i."""
        while len(self.queued) <= self.schedule.requested_ahead:
            self.queued.append(self.workers.send(method, args))

    def counts(self) -> dict[str, float]:
        if self.schedule.max_age is None:  # nothing is dropped: the rows stay as they were
            return self.workers.counts()
        return {**self.workers.counts(), "dropped_segments": float(self.dropped)}

    def figures(self) -> dict[str, float]:
        return {"queue_depth": float(self.queue_depth)}

    def close(self) -> None:
        """The workers belong to the Ray job and end with it (segments still queued are dropped)."""


def _finished(call: QueuedCall) -> bool:
    """Every worker has finished ``call`` (without waiting)."""
    import ray

    done, _ = ray.wait(call.refs, num_returns=len(call.refs), timeout=0)
    return len(done) == len(call.refs)
