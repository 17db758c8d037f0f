"""Where an update's time goes: each training loop owns a ``PhaseClock`` and hands it to what its
runner builds (the algorithm, the collector, the gradient sync), which mark their phases with
``with clock("env"): ...``; the loop takes the totals once per update (``time/*`` metrics,
averaged over ranks). One clock per loop: two loops in one process never mix their times."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from distrl.config.algorithm import AlgorithmSection

SHARED_PHASES = (
    "env", "inference", "publish", "collector_wait", "forward", "backward", "sync", "sync_wait",
    "sync_transfer", "optimizer", "update", "eval", "log", "checkpoint",
)  # fmt: skip
"""The phases of acting (a rank's own, or publishing weights to its collector processes and
waiting for their segments), gradient steps and the loop's own work, whatever the algorithm."""


class PhaseClock:
    def __init__(self, phases: Sequence[str] | None = None) -> None:
        """``phases``: every phase the training loop may see timed (``SHARED_PHASES`` and the
        algorithm's ``AlgorithmSection.phases``); it reports all of them, zero where unused, so
        the ranks' metric sums line up, and timing any other is a bug. None: any phase, for a
        clock of a component's own that no loop sums over ranks (an env worker's)."""
        self.phases = tuple(phases or ())
        self.strict = phases is not None
        self.seconds = dict.fromkeys(self.phases, 0.0)

    @classmethod
    def for_algorithm(cls, algo: AlgorithmSection) -> PhaseClock:
        return cls((*SHARED_PHASES, *algo.phases))

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        if self.strict and name not in self.seconds:
            raise KeyError(f"phase {name!r} is not declared (AlgorithmSection.phases): {self.phases}")
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - start

    def take(self) -> dict[str, float]:
        """Seconds per phase since the last ``take``, and start over."""
        taken = self.seconds
        self.seconds = dict.fromkeys(self.phases, 0.0)
        return taken
