"""DD-PPO's preemption of stragglers (Wijmans et al. 2020, section 4).

A rank that finished collecting counts itself in under a per-update key of the process group's
store; the others look at that count after every env step and stop once enough ranks are done.
Each rank then updates on what it has, and the gradient sync weighs ranks by their sample counts,
so the update is the one over the union of all collected samples.
"""

from __future__ import annotations

import math
import time

from distrl.comm import Comm

MIN_ROLLOUT_FRACTION = 0.25
"""A preempted rank keeps at least this share of its rollout (Habitat's short-rollout threshold)."""
POLL_INTERVAL_S = 0.005
"""Ask the store at most this often: a round-trip per env step cost more than it saved on small
CPU hosts, and a few ms of reaction time is small against a rollout."""


class StragglerCutoff:
    def __init__(self, comm: Comm, threshold: float | None, rollout_steps: int, min_steps: int = 1) -> None:
        """``min_steps``: steps a cut rollout needs at the least (e.g. one sample per minibatch)."""
        self._comm = comm
        enabled = threshold is not None and comm.world_size > 1
        self._enough_ranks = math.ceil(threshold * comm.world_size) if enabled else math.inf
        self._min_steps = max(math.ceil(MIN_ROLLOUT_FRACTION * rollout_steps), min_steps)
        self._key = ""
        self._next_poll = 0.0

    @property
    def enabled(self) -> bool:
        return self._enough_ranks < self._comm.world_size

    def begin(self, update_index: int) -> None:
        self._key = f"collect_done/{update_index}"
        self._next_poll = 0.0

    def should_stop(self, steps_collected: int) -> bool:
        """True once enough other ranks are done and this rank has its minimum share."""
        if not self.enabled or steps_collected < self._min_steps:
            return False
        now = time.monotonic()
        if now < self._next_poll:
            return False
        self._next_poll = now + POLL_INTERVAL_S
        return self._comm.arrivals(self._key) >= self._enough_ranks

    def finish(self) -> None:
        """This rank is done collecting (fully or cut short)."""
        if self.enabled:
            self._comm.arrive(self._key)

    def forget(self) -> None:
        """Called after a collective that every rank reaches only after collecting: no rank
        reads this update's key any more."""
        if self.enabled and self._comm.is_main:
            self._comm.forget(self._key)
