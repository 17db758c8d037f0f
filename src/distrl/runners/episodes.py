"""Undiscounted returns and lengths of the episodes a rank's envs finish.

Sums run on the envs' device; finished episodes reach the host once per ``stats()`` call, not
once per step, so a GPU rollout does not wait on the host for bookkeeping.
"""

from __future__ import annotations

from collections import deque

import torch

from distrl.runners.base import EpisodeStats


class EpisodeTracker:
    def __init__(self, num_envs: int, window: int, device: torch.device) -> None:
        self.running_return = torch.zeros(num_envs, dtype=torch.float64, device=device)
        self.running_length = torch.zeros(num_envs, dtype=torch.int64, device=device)
        self._ended: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []
        """(dones, returns, lengths) of each step since the last ``stats()``."""
        self.returns: deque[float] = deque(maxlen=window)
        self.lengths: deque[int] = deque(maxlen=window)
        self.finished = 0

    def step(self, rewards: torch.Tensor, dones: torch.Tensor) -> None:
        self.running_return += rewards
        self.running_length += 1
        self._ended.append((dones.clone(), self.running_return.clone(), self.running_length.clone()))
        self.running_return.masked_fill_(dones, 0.0)
        self.running_length.masked_fill_(dones, 0)

    def stats(self) -> EpisodeStats:
        if self._ended:
            dones, returns, lengths = (torch.stack(column) for column in zip(*self._ended, strict=True))
            self._ended.clear()
            # Step by step, env by env: the order in which the episodes ended.
            self.returns.extend(returns[dones].tolist())
            self.lengths.extend(lengths[dones].tolist())
            self.finished += int(dones.sum())
        return EpisodeStats(sum(self.returns), sum(self.lengths), len(self.returns), self.finished)
