"""Collecting ahead of the learner, whatever carries it: one schedule (``collect.lag``,
``collect.weights``, ``collect.queue_full``, ``collect.max_age``) read alike by collector
processes (``collect.processes``), Ray mode's env workers and its generation workers, and one
table of what a transport cannot do, checked in one place.

The schedule: segment ``i`` acts with the weights of the learner's request ``max(i - lag, 0)``
(``exact``: as deterministic as collecting in the learner's own process), or with the newest
weights published when the segment starts (``newest``: ages vary with timing); at most
``max(lag, 1)`` finished segments wait for the learner; the learner drops any segment more than
``max_age`` updates older than its weights, and cuts the envs' episodes where the dropped steps
were lost.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from distrl.errors import UserError

if TYPE_CHECKING:
    from distrl.config.sections import CollectConfig
    from distrl.storage.segments import Segment

PROCESSES = "collector processes"
ENV_WORKERS = "Ray env workers"
GENERATION_WORKERS = "Ray generation workers"


@dataclass(frozen=True)
class Schedule:
    """How a learner's collectors run ahead of it (``collect.*``)."""

    lag: int
    newest: bool = False
    """Each segment acts with the newest weights published when it starts, not those of the
    request ``lag`` before."""
    drop_oldest: bool = False
    """A full queue of finished segments is written over, oldest first (collector processes)."""
    max_age: int | None = None
    """The oldest segment the learner trains on, in updates; None: every one."""

    @classmethod
    def of(cls, collect: CollectConfig) -> Schedule:
        newest, drop_oldest = collect.weights == "newest", collect.queue_full == "drop_oldest"
        return cls(collect.lag, newest, drop_oldest, collect.max_age)

    @property
    def queued(self) -> int:
        """Finished segments that may wait for the learner."""
        return max(self.lag, 1)

    @property
    def slots(self) -> int:
        """Shared-memory slots a collector process writes its segments into: the queued ones, the
        one it writes and the one its learner reads."""
        return self.queued + 2

    @property
    def requested_ahead(self) -> int:
        """Segments a learner keeps asked for beyond the one it takes (Ray's workers collect only
        what was asked): ``lag``, or with the newest weights at least one, so that a worker is
        collecting while the learner updates."""
        return self.queued if self.newest else self.lag

    def too_old(self, learner_version: int, segment_version: int) -> bool:
        """A segment acted by ``segment_version`` is dropped by a learner at ``learner_version``."""
        return self.max_age is not None and learner_version - segment_version > self.max_age


def cut_episodes(segment: Segment) -> Segment:
    """``segment`` after segments before it were dropped: its envs' running episodes lost steps
    there, so they are cut where they were (``restarted``), as the episode statistics and
    replay's n-step returns need."""
    segment.restarted.fill_(True)
    return replace(segment, episodes_cut=True)


@dataclass(frozen=True)
class Refusal:
    """What one transport cannot do yet: ``collect.<key>`` set to ``value``, and the line that
    says so."""

    transport: str
    key: str
    value: object
    error: UserError


REFUSALS = (
    Refusal(ENV_WORKERS, "queue_full", "drop_oldest", UserError(
        f"collect.queue_full=drop_oldest with {ENV_WORKERS}: they collect only the segments the "
        "learner asked for, so a full queue waits; drop_oldest is for collector processes "
        "(collect.processes, without Ray)",
        code="ray-collect-queue-drop-oldest",
    )),
    Refusal(GENERATION_WORKERS, "weights", "newest", UserError(
        f"collect.weights=newest with {GENERATION_WORKERS}: GRPO's steps are generated with the "
        "weights of update step - collect.lag exactly (its prompts and sampling noise are keyed on "
        "the step); leave collect.weights at exact",
        code="ray-generation-weights-newest",
    )),
)  # fmt: skip
"""Every option of ``collect`` works on every transport except these."""


def transport(collect: CollectConfig, env_workers: int, generation_workers: int) -> str | None:
    """What collects ahead for a learner: collector processes, or Ray mode's env or generation
    workers (``workers.env``, ``workers.generation``); None: the learner collects itself."""
    if collect.processes:
        return PROCESSES
    if env_workers:
        return ENV_WORKERS
    return GENERATION_WORKERS if generation_workers else None


def check_transport(collect: CollectConfig, carried_by: str | None) -> None:
    """The line of ``REFUSALS`` for an option of ``collect`` that ``carried_by`` cannot do."""
    for refusal in REFUSALS:
        if refusal.transport == carried_by and getattr(collect, refusal.key) == refusal.value:
            raise refusal.error
