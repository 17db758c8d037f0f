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
at most ``max(L, 1)`` finished segments ahead (waiting for the learner to read one, or with
``collect.queue_full: drop_oldest`` writing over the oldest it has not begun to read, of up to
``max(L, 1) + 2``); ages then
vary with timing. With ``collect.max_age: K`` the learner drops segments more than ``K`` updates
older than its weights. Dropped segments of either kind are counted (``dropped_segments``). An
off-policy algorithm explores (DQN's epsilon) as the request a segment acts for asks.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import math
import multiprocessing
import queue
import sys
import time
import traceback
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import torch
import torch.multiprocessing  # registers torch's tensor pickling: tensors cross through shared memory

from distrl.algos.algorithm import ENVS
from distrl.collect.ahead import PROCESSES, Schedule, check_transport, cut_episodes
from distrl.collect.base import CollectRequest, never
from distrl.collect.part import CollectorPart
from distrl.collect.segment_slots import SegmentSlots, SlotStates
from distrl.collect.weights import ActingWeights, PublishedWeights
from distrl.config.run_algorithm import check_acting, learns_from
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
                "collect.processes to 1 or more",
                code="collect-ahead-workers-without-ray",
            )
        return
    if learns_from(cfg) != ENVS or cfg.algorithm.collector is None:
        raise UserError(
            f"collect.processes={cfg.collect.processes}: collector processes step envs for an algorithm "
            "that collects from them (PPO, A2C, APPO, DQN, SAC, or one of your own with an "
            f"Algorithm.collector) with ml_framework: torch, not algo.name={cfg.algo.name}; "
            "set collect.processes=0",
            code="collect-processes-no-collector",
        )
    check_acting(cfg, f"collect.processes={cfg.collect.processes}", "collector processes")
    check_transport(cfg.collect, PROCESSES)
    if cfg.train.straggler_threshold is not None:
        raise UserError(
            "train.straggler_threshold: collector processes always collect whole segments; "
            "unset it or set collect.processes=0",
            code="collect-processes-straggler",
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


def learner_gone() -> None:
    if not _learner_alive():
        raise LearnerGone


class WaitClock:
    """A collector process's time waiting for its learner (a context per wait), as a share of
    the time since the last ``share()``."""

    def __init__(self) -> None:
        self.since = time.perf_counter()
        self.waited_s = 0.0

    def __enter__(self) -> None:
        self.started = time.perf_counter()

    def __exit__(self, *exc: object) -> None:
        self.waited_s += time.perf_counter() - self.started

    def share(self) -> float:
        now = time.perf_counter()
        share = self.waited_s / max(now - self.since, 1e-9)
        self.since, self.waited_s = now, 0.0
        return share


def run_part(
    cfg: RunConfig,
    seeds: list[int],
    noise_seed: list[int],
    noise_rows: int,
    first: int,
    schedule: Schedule,
    requests: Connection,
    finished: multiprocessing.Queue,
    states: SlotStates,
    generation: int = 0,
) -> None:
    """A collector process (its ``generation``-th start: fresh env seeds after a restart): build
    the part, report its spaces, reset on the learner's word, then
    collect segment after segment: segment ``i`` as the learner's request ``max(i - lag, 0)``
    says, or (``schedule.newest``) as the newest request taken when it starts. ``requests``
    brings every request in order, with the weights it acts with when they are a new version
    (else None); None instead of a request: stop. Each segment is written into a shared-memory
    slot (``collect.segment_slots``; the slots themselves sent once, before the first) that
    ``states`` says is free (or, ``schedule.drop_oldest``, holds the oldest queued segment), and
    its slot and number put on ``finished``: waiting for room there is what holds a process back
    (``schedule.slots`` leaves a slot free whenever there is room). Whatever goes wrong is sent as
    ``("error", message, is_user_error, code)`` (``code``: a UserError's id, if it has one); the
    process ends with the learner, whichever way it ended."""
    part: CollectorPart | None = None
    slots: SegmentSlots | None = None
    lag, newest = schedule.lag, schedule.newest
    try:
        part = CollectorPart(cfg, seeds, noise_seed, noise_rows, first, generation)
        to_learner(finished, ("spaces", part.spaces))
        if from_learner(requests) is None:
            return
        to_learner(finished, ("obs", part.reset().clone()))
        request: CollectRequest | None = None
        weights: ActingWeights | None = None
        taken = 0
        """Requests taken from the queue."""
        index = 0
        waited = WaitClock()
        while True:
            # Exact: take the requests up to the one this segment acts for, waiting for it.
            # Newest: take every request waiting, waiting only for the first.
            while request is None or (requests.poll() if newest else taken <= max(index - lag, 0)):
                with waited:
                    message = from_learner(requests)
                if message is None:
                    return
                request, new_weights = message
                weights = new_weights or weights
                taken += 1
            assert weights is not None
            segment = part.collect(weights, request)
            if slots is None:
                slots = SegmentSlots.like(segment, schedule.slots)
                to_learner(finished, ("slots", slots.segments))
            slot = states.slot_to_write(schedule.drop_oldest, learner_gone)
            fields = slots.write(slot, segment)
            index += 1
            states.written(slot, index, learner_gone)
            # The share sent is of the time up to now; waiting for room in the queue counts
            # towards the next segment's.
            with waited:
                to_learner(finished, ("segment", (slot, index, fields, waited.share())))
    except LearnerGone:
        return
    except BaseException as exc:
        user_error = isinstance(exc, UserError)
        code = exc.code if user_error else None
        with contextlib.suppress(LearnerGone):
            text = str(exc) if user_error else traceback.format_exc()
            to_learner(finished, ("error", text, user_error, code))
            # Stay until the learner says stop: the segments queued before the error pass their
            # tensors through this process, which must live until the learner has read them.
            while from_learner(requests) is not None:
                pass
    finally:
        # A learner that is gone reads nothing more: what is still buffered for it must not keep
        # this process from ending (the queue's feeder would wait on a full pipe for ever).
        finished.cancel_join_thread()
        if part is not None:
            part.close()


class CollectorDied(RuntimeError):
    """A collector process ended without being told to."""

    def __init__(self, index: int, exit_code: int | None) -> None:
        super().__init__(f"collector process {index} ended (exit code {exit_code})")
        self.index = index


@dataclass
class CollectorProcess:
    """A started collector process and the learner's ends of its channels."""

    process: multiprocessing.Process
    requests: Connection
    """The learner's requests (a pipe: the learner's sends need no thread of their own, whose
    queue would outlive ``stop``)."""
    finished: multiprocessing.Queue
    """From the process: its spaces, first observations, slots, segments and errors."""
    states: SlotStates
    """Its slots' states, shared with it."""

    def close(self) -> None:
        self.finished.close()
        self.requests.close()


class CollectorProcesses:
    """A rank's collector processes (``collect.base.EnvWorkers``): ``count`` parts of its envs,
    running ahead as ``schedule`` says; segments more than ``schedule.max_age`` updates old are dropped by
    the learner; a process that dies is restarted up to ``max_restarts`` times in a row."""

    def __init__(self, count: int, schedule: Schedule, max_restarts: int = 0) -> None:
        self.count = count
        self.schedule = schedule
        self.max_restarts = max_restarts
        self.restarts = 0
        """Processes started again after dying, in this launch (each with fresh env seeds)."""
        self.parts: list[tuple[Any, ...]] = []
        """Each process's part: (config, env seeds, noise seed, the rank's envs, first env)."""
        self.running: list[CollectorProcess] = []

    def start(self, cfg: RunConfig, seeds: list[int], noise_seed: list[int]) -> tuple[gym.Space, gym.Space]:
        if len(seeds) < self.count:
            raise UserError(
                f"collect.processes={self.count} for this rank's {len(seeds)} envs: every collector "
                "process needs at least one env (raise env.num_envs or lower collect.processes)",
                code="collect-processes-exceed-envs",
            )
        atexit.register(self.stop)  # registered after multiprocessing's exit hook: runs before it
        for i in range(self.count):
            first, count = even_split(len(seeds), i, self.count)
            self.parts.append((cfg, seeds[first : first + count], noise_seed, len(seeds), first))
            self.running.append(self.spawn(i))
        return [self.take(i, "spaces", START_TIMEOUT_S) for i in range(self.count)][0]

    def spawn(self, index: int, generation: int = 0) -> CollectorProcess:
        """Start process ``index`` (its ``generation``-th start) with channels of its own."""
        context = torch.multiprocessing.get_context("spawn")
        requests_in, requests = context.Pipe(False)
        # Dropping the oldest, a process never waits to queue: its stale messages are few and small.
        finished = context.Queue(maxsize=0 if self.schedule.drop_oldest else self.schedule.queued)
        states = SlotStates(self.schedule.slots, context.Lock(), POLL_S)
        channels = (requests_in, finished, states)
        args = (*self.parts[index], self.schedule, *channels, generation)
        # Not a daemon: its envs may step in processes of their own (env.backend: gymnasium_async).
        process = context.Process(target=run_part, args=args, name=f"distrl-collector-{index}")
        process.start()
        requests_in.close()  # the process's end: a process that ended leaves it broken
        return CollectorProcess(process, requests, finished, states)

    def restart(self, index: int) -> None:
        """Start process ``index`` again (fresh env seeds), its envs reset: it then collects as at
        the launch's start, from the next request it is sent."""
        self.running[index].process.join(STOP_TIMEOUT_S)
        self.running[index].close()
        self.restarts += 1
        self.running[index] = self.spawn(index, generation=self.restarts)
        self.take(index, "spaces", START_TIMEOUT_S)
        self.send_to(index, ())
        self.take(index, "obs", START_TIMEOUT_S)

    def acting(
        self, modules: dict[str, torch.nn.Module], device: torch.device, clock: PhaseClock | None = None
    ) -> LaggedCollection:
        return LaggedCollection(self, modules, device, clock)

    def check_alive(self, index: int) -> None:
        process = self.running[index].process
        if not process.is_alive():
            raise CollectorDied(index, process.exitcode)

    def take(self, index: int, kind: str, timeout_s: float | None = None) -> Any:
        """Process ``index``'s next message, which must be of ``kind``; its error as the rank's.
        ``timeout_s``: how long it may take (None: as long as the process lives)."""
        deadline = time.monotonic() + (timeout_s or math.inf)
        while True:
            try:
                message = self.running[index].finished.get(timeout=POLL_S)
                break
            except queue.Empty:
                self.check_alive(index)
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"collector process {index} sent no {kind} within {timeout_s:g} s"
                    ) from None
            except (OSError, EOFError):  # a segment whose sender ended: its error, if any, follows
                continue
        if message[0] == "error":
            _, text, user_error, code = message
            if user_error:
                raise UserError(text, code=code)
            raise RuntimeError(f"collector process {index} failed:\n{text}")
        assert message[0] == kind, (message[0], kind)
        return message[1]

    def send(self, message: tuple[CollectRequest, ActingWeights | None] | tuple[()] | None) -> None:
        """To every process: a request (with new weights or None), the word to reset, or None: stop."""
        for index in range(len(self.running)):
            self.send_to(index, message)

    def send_to(self, index: int, message: Any) -> None:
        to_process(self.running[index].requests, message)

    def claim(self, index: int, slot: int, number: int) -> bool:
        """Begin to read process ``index``'s segment ``number`` in ``slot``: False when the
        process has written over it since (``SlotStates.claim``)."""
        return self.running[index].states.claim(slot, number, lambda: self.check_alive(index))

    def queued(self, index: int) -> int:
        """Process ``index``'s segments waiting for the learner (0 for a process that died)."""
        try:
            return self.running[index].states.queued(lambda: self.check_alive(index))
        except CollectorDied:
            return 0

    def free(self, index: int, slot: int) -> None:
        """Slot ``slot`` of process ``index`` was read: it may write it again. A process that died
        meanwhile is found (and restarted) by the next ``take``."""
        with contextlib.suppress(CollectorDied):
            self.running[index].states.free(slot, lambda: self.check_alive(index))

    def stop(self) -> None:
        """Tell every process to stop, taking what they still send so that none stays blocked on
        a full queue; kill what has not ended within ``STOP_TIMEOUT_S``. Also run at the
        interpreter's exit (before ``multiprocessing`` joins its children, which are not daemons)
        when a launch ends on an error before its runner closed its collector."""
        atexit.unregister(self.stop)
        self.send(None)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for running in self.running:
            process = running.process
            while process.is_alive() and time.monotonic() < deadline:
                # A message with tensors comes through its sender's socket: one that has just
                # ended leaves it unreadable, dropped likewise.
                with contextlib.suppress(queue.Empty, OSError, EOFError):
                    running.finished.get(timeout=0.05)
                process.join(0.0)
            if process.is_alive():
                process.kill()
            process.join()
            running.close()
        # Released now, not at interpreter exit, which distrl's command line skips (os._exit):
        # their semaphores would be reported as leaked. The queues sit in reference cycles:
        # collected now too.
        self.running = []
        gc.collect()


def in_shared_memory(weights: ActingWeights) -> ActingWeights:
    """``weights`` moved into shared memory once: each process's queue then passes a handle."""
    for tensors in weights.tensors.values():
        for tensor in tensors.values():
            tensor.share_memory_()
    return weights


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
        self.device = device
        self.clock = clock or PhaseClock()
        self.weights = PublishedWeights(modules, in_shared_memory)
        """Each version's weights, in shared memory (a restarted process is sent the newest)."""
        self.dropped = 0
        """Segments dropped in this launch: too old, or written over in a full queue."""
        self.slots: list[SegmentSlots | None] = [None] * processes.count
        """Each process's shared-memory slots, sent before its first segment."""
        self.numbers = [0] * processes.count
        """The number of each process's last segment taken (the process numbers them from 1)."""
        self.queue_depths = [0] * processes.count
        """Segments each process had waiting when the learner asked for the last one."""
        self.idle_shares = [0.0] * processes.count
        """The share of each process's time it waited for the learner, up to its last segment
        taken."""

    def reset(self) -> torch.Tensor:
        self.processes.send(())
        parts = [self.processes.take(i, "obs", START_TIMEOUT_S) for i in range(self.processes.count)]
        return torch.cat(parts).to(self.device)

    def collect(self, request: CollectRequest) -> Segment:
        """Send ``request`` (with its version's weights when they are new: the learner's versions
        only grow within a launch), then join every process's next segment, which acts as the
        request ``collect.lag`` before this one asked."""
        request = replace(request, should_stop=never)
        with self.clock("publish"):
            weights, new = self.weights.publish(request.policy_version)
            self.processes.send((request, weights if new else None))
        with self.clock("collector_wait"):
            taken = [self.fresh_segment(i, request) for i in range(self.processes.count)]
        joined = type(taken[0][0]).join([segment for segment, _ in taken], self.device)
        for index, (_, slot) in enumerate(taken):  # copied out by the join: written again next
            self.processes.free(index, slot)
        return joined

    def fresh_segment(self, index: int, request: CollectRequest) -> tuple[Segment, int]:
        """Process ``index``'s next segment at most ``collect.max_age`` updates older than ``request``'s
        version, and its slot. Older ones are dropped (their slots freed) and counted, as are those
        the process wrote over in a full queue (the gaps in its numbers); then the envs' running
        episodes are cut (``collect.ahead.cut_episodes``). A process that died is restarted
        (``restart``)."""
        schedule, dropped, failures = self.processes.schedule, False, 0
        self.queue_depths[index] = self.processes.queued(index)
        while True:
            try:
                slots = self.slots[index]
                if slots is None:
                    slots = self.slots[index] = SegmentSlots(self.processes.take(index, "slots"))
                slot, number, fields, self.idle_shares[index] = self.processes.take(index, "segment")
                if not self.processes.claim(index, slot, number):
                    continue  # written over since it was queued: the gap counts it
            except CollectorDied as died:
                failures += 1
                self.restart(died, failures, request)
                continue
            if gap := number - self.numbers[index] - 1:
                self.dropped, dropped = self.dropped + gap, True
            self.numbers[index] = number
            segment = slots.read(slot, fields)
            if not schedule.too_old(request.policy_version, segment.policy_version):
                break
            self.dropped, dropped = self.dropped + 1, True
            self.processes.free(index, slot)
        return cut_episodes(segment) if dropped else segment, slot

    def restart(self, died: CollectorDied, failures: int, request: CollectRequest) -> None:
        """Start the process that ``died`` again (fresh envs: the segment it was collecting is
        lost, never trained on) and have it collect for ``request`` with its weights, as at the
        launch's start; one line says so. More than ``collect.max_restarts`` failures in a row
        stop the run with that line."""
        limit = self.processes.max_restarts
        if failures > limit:
            raise UserError(
                f"{died}: {failures} failure{'s' * (failures > 1)} in a row, more than "
                f"collect.max_restarts={limit}",
                code="collect-processes-restarts-exhausted",
            )
        print(
            f"distrl: {died}; started again with fresh envs (restart {failures} of at most {limit} in "
            "a row), the segment it was collecting lost",
            file=sys.stderr,
            flush=True,
        )
        self.processes.restart(died.index)
        self.slots[died.index], self.numbers[died.index] = None, 0
        self.processes.send_to(died.index, (request, self.weights.handle))

    def counts(self) -> dict[str, float]:
        return {"dropped_segments": float(self.dropped), "collector_restarts": float(self.processes.restarts)}

    def figures(self) -> dict[str, float]:
        count = self.processes.count
        return {
            "queue_depth": sum(self.queue_depths) / count,
            "collector_idle_share": sum(self.idle_shares) / count,
        }

    def close(self) -> None:
        self.processes.stop()
