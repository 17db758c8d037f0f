"""Where an update's time goes: each training loop owns a ``PhaseClock`` and hands it to what its
runner builds (the algorithm, the collector, the gradient sync), which mark their phases with
``with clock("env"): ...``; the loop takes the totals once per update (``time/*`` metrics,
averaged over ranks). One clock per loop: two loops in one process never mix their times."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

PHASES = (
    "env", "inference", "generate", "score", "log_probs",
    "returns", "replay", "data", "forward", "backward", "sync", "sync_wait",
    "sync_transfer", "optimizer", "update", "eval", "log", "checkpoint",
)  # fmt: skip
"""Every phase any rank may time: each rank reports all of them (zero where unused), so the
ranks' metric sums line up."""


class PhaseClock:
    def __init__(self) -> None:
        self.seconds = dict.fromkeys(PHASES, 0.0)

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - start

    def take(self) -> dict[str, float]:
        """Seconds per phase since the last ``take``, and start over."""
        taken = self.seconds
        self.seconds = dict.fromkeys(PHASES, 0.0)
        return taken
