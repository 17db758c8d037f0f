"""Undiscounted returns and lengths of the episodes a rank's envs finish."""

from __future__ import annotations

from collections import deque

import numpy as np

from distrl.runners.base import EpisodeStats


class EpisodeTracker:
    def __init__(self, num_envs: int, window: int) -> None:
        self.running_return = np.zeros(num_envs)
        self.running_length = np.zeros(num_envs, dtype=np.int64)
        self.returns: deque[float] = deque(maxlen=window)
        self.lengths: deque[int] = deque(maxlen=window)
        self.finished = 0

    def step(self, rewards: np.ndarray, dones: np.ndarray) -> None:
        self.running_return += rewards
        self.running_length += 1
        for i in np.flatnonzero(dones):
            self.returns.append(float(self.running_return[i]))
            self.lengths.append(int(self.running_length[i]))
            self.running_return[i] = 0.0
            self.running_length[i] = 0
            self.finished += 1

    def stats(self) -> EpisodeStats:
        return EpisodeStats(sum(self.returns), sum(self.lengths), len(self.returns), self.finished)
