"""Collector processes beside a rank: its envs stepped in other processes while it learns.

``collect.processes: N`` splits a rank's envs into N parts, as Ray mode's env workers split them
(``collect.part.CollectorPart``), each stepped by a process of its own started beside the rank
(no Ray). A rank's collector is then a ``LaggedCollection``: each request publishes the rank's
acting weights as a new version (once, in shared memory, for all its processes) and takes the
next segment of every part, which each process writes into slots of shared memory it made once
(``collect.segment_slots``).

``collect.lag: L`` is how far the processes run ahead of the learner: a process collects its
segment ``i`` as the learner's request ``max(i - L, 0)`` says (acting with the weights that request
published, exploring as it asks), waiting for that request when the learner has not made it yet.
So with ``L = 0`` collection and learning take turns as in one process (the same samples, the
same weights), and with ``L = 1`` the processes collect the next segment while the learner
updates on this one: every sample one update old once learning started (cleanba's schedule; the
correction is the algorithm's), and a run as deterministic as one without processes.

With ``collect.weights: newest`` a process instead starts each segment with the newest request
it has been sent, never waiting for the learner (as Sample Factory's and RLlib's APPO collect),
at most ``max(L, 1)`` finished segments ahead; ages then vary with timing. With
``collect.max_age: K`` the learner drops (and counts, ``dropped_segments``) segments more than
``K`` updates older than its weights. An off-policy algorithm explores (DQN's epsilon) as the
request a segment acts for asks.
"""

from __future__ import annotations

import contextlib
import gc
import math
import multiprocessing
import queue
import time
import traceback
from dataclasses import replace
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import torch
import torch.multiprocessing  # registers torch's tensor pickling: tensors cross through shared memory

from distrl.algos.registry import ENVS, learns_from
from distrl.collect.base import CollectRequest, never
from distrl.collect.part import ActingWeights, CollectorPart, cpu_weights
from distrl.collect.segment_slots import SegmentSlots
from distrl.errors import UserError
from distrl.sharding import even_split
from distrl.storage.segments import Segment
from distrl.timing import PhaseClock

if TYPE_CHECKING:
    from distrl.config.run import RunConfig

START_TIMEOUT_S = 300.0
"""How long a process may take to import, build its envs and reset them."""
STOP_TIMEOUT_S = 10.0
POLL_S = 1.0
"""How often a process waiting on the learner checks that the learner still lives, and the
learner that the process does."""


def check_collector_processes(cfg: RunConfig) -> None:
    """A run without Ray collects ahead only with collector processes, which step envs for an
    algorithm that collects from them online, with a torch learner, in whole segments."""
    if not cfg.collect.processes:
        if ahead := cfg.collect.ahead():  # the config allows it for Ray mode's env workers
            raise UserError(
                f"{ahead} with collect.processes=0: env and generation workers (workers.env, "
                "workers.generation) collect ahead only in Ray mode (--launcher ray); set "
                "collect.processes to 1 or more"
            )
        return
    if learns_from(cfg) != ENVS or cfg.algorithm.collector is None:
        raise UserError(
            f"collect.processes={cfg.collect.processes}: collector processes step envs for an algorithm "
            "that collects from them (PPO, A2C, DQN, SAC) with ml_framework: torch; set collect.processes=0"
        )
    if cfg.train.straggler_threshold is not None:
        raise UserError(
            "train.straggler_threshold: collector processes always collect whole segments; "
            "unset it or set collect.processes=0"
        )


class LearnerGone(Exception):
    """The process that started this collector process has ended."""


def from_learner(inbox: Connection) -> Any:
    """The learner's next message on ``inbox``, waiting as long as the learner lives."""
    while not inbox.poll(POLL_S):
        if not _learner_alive():
            raise LearnerGone
    return inbox.recv()


def to_learner(finished: multiprocessing.Queue, message: tuple[Any, ...]) -> None:
    """Put ``message`` for the learner, waiting for room as long as the learner lives."""
    while True:
        try:
            return finished.put(message, timeout=POLL_S)
        except queue.Full:
            if not _learner_alive():
                raise LearnerGone from None


def to_process(outbox: Connection, message: Any) -> None:
    """Send ``message`` to a collector process; one that has ended is found by ``take``."""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        outbox.send(message)


def _learner_alive() -> bool:
    parent = multiprocessing.parent_process()
    return parent is not None and parent.is_alive()


def slot_count(lag: int) -> int:
    """Shared-memory slots a process writes its segments into: as many as wait on its queue
    (``max(lag, 1)``), the one it writes and the one its learner reads."""
    return max(lag, 1) + 2


def run_part(
    cfg: RunConfig,
    seeds: list[int],
    noise_seed: list[int],
    noise_rows: int,
    first: int,
    lag: int,
    newest: bool,
    requests: Connection,
    finished: multiprocessing.Queue,
    freed: Connection,
) -> None:
    """A collector process: build the part, report its spaces, reset on the learner's word, then
    collect segment after segment: segment ``i`` as the learner's request ``max(i - lag, 0)``
    says, or (``newest``) as the newest request taken when it starts. ``requests`` brings every
    request in order, with the weights it acts with when they are a new version (else None);
    None instead of a request: stop. Each segment is written into a free shared-memory slot
    (``collect.segment_slots``; the slots themselves sent once, before the first) and its slot's
    index put on ``finished``; ``freed`` brings back the slots the learner has read. Whatever
    goes wrong is sent as ``("error", message, is_user_error)``; the process ends with the
    learner, whichever way it ended."""
    part: CollectorPart | None = None
    slots: SegmentSlots | None = None
    free: list[int] = []
    try:
        part = CollectorPart(cfg, seeds, noise_seed, noise_rows, first)
        to_learner(finished, ("spaces", part.spaces))
        if from_learner(requests) is None:
            return
        to_learner(finished, ("obs", part.reset().clone()))
        request: CollectRequest | None = None
        weights: ActingWeights | None = None
        taken = 0
        """Requests taken from the queue."""
        index = 0
        while True:
            # Exact: take the requests up to the one this segment acts for, waiting for it.
            # Newest: take every request waiting, waiting only for the first.
            while request is None or (requests.poll() if newest else taken <= max(index - lag, 0)):
                message = from_learner(requests)
                if message is None:
                    return
                request, new_weights = message
                weights = new_weights or weights
                taken += 1
            assert weights is not None
            segment = part.collect(weights, request)
            if slots is None:
                slots = SegmentSlots.like(segment, slot_count(lag))
                free = list(range(len(slots.segments)))
                to_learner(finished, ("slots", slots.segments))
            slot = free.pop() if free else from_learner(freed)
            to_learner(finished, ("segment", (slot, slots.write(slot, segment))))
            index += 1
    except LearnerGone:
        return
    except BaseException as exc:
        user_error = isinstance(exc, UserError)
        with contextlib.suppress(LearnerGone):
            to_learner(finished, ("error", str(exc) if user_error else traceback.format_exc(), user_error))
            # Stay until the learner says stop: the segments queued before the error pass their
            # tensors through this process, which must live until the learner has read them.
            while from_learner(requests) is not None:
                pass
    finally:
        if part is not None:
            part.close()


class CollectorProcesses:
    """A rank's collector processes (``collect.base.EnvWorkers``): ``count`` parts of its envs,
    ``lag`` segments ahead, or acting with the ``newest`` weights they have; segments more than
    ``max_age`` updates old are dropped by the learner."""

    def __init__(self, count: int, lag: int, newest: bool = False, max_age: int | None = None) -> None:
        self.count = count
        self.lag = lag
        self.newest = newest
        self.max_age = max_age
        self.processes: list[multiprocessing.Process] = []
        self.requests: list[Connection] = []
        """To each process: the learner's requests (a pipe: the learner's sends need no thread
        of their own, whose queue would outlive ``stop``)."""
        self.finished: list[multiprocessing.Queue] = []
        self.freed: list[Connection] = []
        """To each process: the slots the learner has read."""

    def start(self, cfg: RunConfig, seeds: list[int], noise_seed: list[int]) -> tuple[gym.Space, gym.Space]:
        if len(seeds) < self.count:
            raise UserError(
                f"collect.processes={self.count} for this rank's {len(seeds)} envs: every collector "
                "process needs at least one env (raise env.num_envs or lower collect.processes)"
            )
        context = torch.multiprocessing.get_context("spawn")
        for i in range(self.count):
            first, count = even_split(len(seeds), i, self.count)
            (requests_in, requests), (freed_in, freed) = context.Pipe(False), context.Pipe(False)
            finished = context.Queue(maxsize=max(self.lag, 1))
            part = seeds[first : first + count]
            channels = (requests_in, finished, freed_in)
            args = (cfg, part, noise_seed, len(seeds), first, self.lag, self.newest, *channels)
            process = context.Process(target=run_part, args=args, name=f"distrl-collector-{i}", daemon=True)
            process.start()
            requests_in.close()  # the process's ends: a process that ended leaves them broken
            freed_in.close()
            self.processes.append(process)
            self.requests.append(requests)
            self.finished.append(finished)
            self.freed.append(freed)
        return [self.take(i, "spaces", START_TIMEOUT_S) for i in range(self.count)][0]

    def acting(
        self, modules: dict[str, torch.nn.Module], device: torch.device, clock: PhaseClock | None = None
    ) -> LaggedCollection:
        return LaggedCollection(self, modules, device, clock)

    def take(self, index: int, kind: str, timeout_s: float | None = None) -> Any:
        """Process ``index``'s next message, which must be of ``kind``; its error as the rank's.
        ``timeout_s``: how long it may take (None: as long as the process lives)."""
        process, deadline = self.processes[index], time.monotonic() + (timeout_s or math.inf)
        while True:
            try:
                message = self.finished[index].get(timeout=POLL_S)
                break
            except queue.Empty:
                if not process.is_alive():
                    raise RuntimeError(
                        f"collector process {index} ended (exit code {process.exitcode})"
                    ) from None
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"collector process {index} sent no {kind} within {timeout_s:g} s"
                    ) from None
            except (OSError, EOFError):  # a segment whose sender ended: its error, if any, follows
                continue
        if message[0] == "error":
            _, text, user_error = message
            if user_error:
                raise UserError(text)
            raise RuntimeError(f"collector process {index} failed:\n{text}")
        assert message[0] == kind, (message[0], kind)
        return message[1]

    def send(self, message: tuple[CollectRequest, ActingWeights | None] | tuple[()] | None) -> None:
        """To every process: a request (with new weights or None), the word to reset, or None: stop."""
        for requests in self.requests:
            to_process(requests, message)

    def free(self, index: int, slot: int) -> None:
        """Slot ``slot`` of process ``index`` was read: it may write it again."""
        to_process(self.freed[index], slot)

    def stop(self) -> None:
        """Tell every process to stop, taking what they still send so that none stays blocked on
        a full queue or waiting for a slot; kill what has not ended within ``STOP_TIMEOUT_S``."""
        self.send(None)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for index, (process, finished) in enumerate(zip(self.processes, self.finished, strict=True)):
            while process.is_alive() and time.monotonic() < deadline:
                # The slots of segments dropped here are freed, so that no process waits for one
                # before it reads the word to stop. A message with tensors comes through its
                # sender's socket: one that has just ended leaves it unreadable, dropped likewise.
                with contextlib.suppress(queue.Empty, OSError, EOFError):
                    kind, body, *_ = finished.get(timeout=0.05)
                    if kind == "segment":
                        self.free(index, body[0])
                process.join(0.0)
            if process.is_alive():
                process.kill()
            process.join()
        for finished in self.finished:
            finished.close()
        for connection in (*self.requests, *self.freed):
            connection.close()
        # Released now, not at interpreter exit, which distrl's command line skips (os._exit):
        # their semaphores would be reported as leaked. The queues sit in reference cycles:
        # collected now too.
        self.processes, self.requests, self.finished, self.freed = [], [], [], []
        gc.collect()


class LaggedCollection:
    """A rank's collector processes acting with the state of ``modules`` (by name) at the versions
    its requests ask for (``collect.base.Collector``); ``clock`` times the learner's side:
    publishing weights and waiting for segments."""

    def __init__(
        self,
        processes: CollectorProcesses,
        modules: dict[str, torch.nn.Module],
        device: torch.device,
        clock: PhaseClock | None,
    ) -> None:
        self.processes = processes
        self.modules = modules
        self.device = device
        self.clock = clock or PhaseClock()
        self.published = -1
        """The newest version whose weights were sent."""
        self.dropped = 0
        """Segments of a process dropped for their age in this launch."""
        self.slots: list[SegmentSlots | None] = [None] * processes.count
        """Each process's shared-memory slots, sent before its first segment."""

    def reset(self) -> torch.Tensor:
        self.processes.send(())
        parts = [self.processes.take(i, "obs", START_TIMEOUT_S) for i in range(self.processes.count)]
        return torch.cat(parts).to(self.device)

    def collect(self, request: CollectRequest) -> Segment:
        """Send ``request`` (with its version's weights when they are new: the learner's versions
        only grow within a launch), then join every process's next segment, which acts as the
        request ``collect.lag`` before this one asked."""
        with self.clock("publish"):
            weights = None
            if request.policy_version > self.published:
                weights = cpu_weights(request.policy_version, self.modules)
                for tensors in weights.tensors.values():
                    for tensor in tensors.values():
                        tensor.share_memory_()  # once: each process's queue then passes a handle
                self.published = request.policy_version
            self.processes.send((replace(request, should_stop=never), weights))
        with self.clock("collector_wait"):
            taken = [self.fresh_segment(i, request.policy_version) for i in range(self.processes.count)]
        joined = type(taken[0][0]).join([segment for segment, _ in taken], self.device)
        for index, (_, slot) in enumerate(taken):  # copied out by the join: written again next
            self.processes.free(index, slot)
        return joined

    def fresh_segment(self, index: int, version: int) -> tuple[Segment, int]:
        """Process ``index``'s next segment at most ``max_age`` updates older than ``version``,
        and its slot; older ones are dropped (their slots freed), counted, and the envs' running
        episodes cut where they were (``restarted``), as the episode statistics and replay's
        n-step returns need."""
        max_age, dropped = self.processes.max_age, False
        while True:
            slots = self.slots[index]
            if slots is None:
                slots = self.slots[index] = SegmentSlots(self.processes.take(index, "slots"))
            slot, fields = self.processes.take(index, "segment")
            segment = slots.read(slot, fields)
            if max_age is None or version - segment.policy_version <= max_age:
                break
            self.dropped, dropped = self.dropped + 1, True
            self.processes.free(index, slot)
        if dropped:  # the envs' episodes lost their steps in the dropped segment: cut them
            segment.restarted.fill_(True)
        return segment, slot

    def counts(self) -> dict[str, float]:
        return {"dropped_segments": float(self.dropped)}

    def close(self) -> None:
        self.processes.stop()
