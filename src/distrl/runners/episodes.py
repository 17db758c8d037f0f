"""Undiscounted returns and lengths of the episodes a rank's envs finish.

A step only keeps its rewards and done flags; ``stats()`` turns a whole rollout of them into
episode returns with a few tensor operations on the envs' device and brings only the finished
episodes to the host. So a step costs no tensor work here, and a GPU rollout does not wait on the
host for bookkeeping.
"""

from __future__ import annotations

from collections import deque

import torch

from distrl.runners.base import EpisodeStats


class EpisodeTracker:
    def __init__(self, num_envs: int, window: int, device: torch.device) -> None:
        self.running_return = torch.zeros(num_envs, dtype=torch.float64, device=device)
        self.running_length = torch.zeros(num_envs, dtype=torch.int64, device=device)
        """Return and length so far of each env's unfinished episode, as of the last ``stats()``."""
        self.cut = torch.zeros(num_envs, dtype=torch.bool, device=device)
        """Envs whose unfinished episode lost steps (``add_rollout``'s ``restarted``): its end is
        not counted, as its return and length are not the episode's."""
        self._rewards: list[torch.Tensor] = []
        self._dones: list[torch.Tensor] = []
        self.returns: deque[float] = deque(maxlen=window)
        self.lengths: deque[int] = deque(maxlen=window)
        self.finished = 0

    def step(self, rewards: torch.Tensor, dones: torch.Tensor) -> None:
        """Keep one step's ``[num_envs]`` rewards and done flags (not copied: pass fresh tensors)."""
        self._rewards.append(rewards)
        self._dones.append(dones)

    def add_rollout(
        self, rewards: torch.Tensor, dones: torch.Tensor, restarted: torch.Tensor, cut: bool = False
    ) -> None:
        """Count a whole rollout's ``[steps, num_envs]`` rewards and done flags at once; the
        ``restarted`` envs' unfinished episodes were cut before it and are forgotten: reset (a
        launch's start, an env worker rebuilt), their next episodes are whole; not reset (``cut``:
        segments dropped before this one), their running episodes lost steps and are not counted."""
        self._flush()
        self.running_return.masked_fill_(restarted, 0.0)
        self.running_length.masked_fill_(restarted, 0)
        self.cut = torch.where(restarted, cut, self.cut)
        self._finish_episodes(rewards.double(), dones)

    def stats(self) -> EpisodeStats:
        self._flush()
        return EpisodeStats(sum(self.returns), sum(self.lengths), len(self.returns), self.finished)

    def _flush(self) -> None:
        """Count the steps kept by ``step``."""
        if self._rewards:
            self._finish_episodes(torch.stack(self._rewards).double(), torch.stack(self._dones))
            self._rewards.clear()
            self._dones.clear()

    def _finish_episodes(self, rewards: torch.Tensor, dones: torch.Tensor) -> None:
        """Episode returns from running sums: an episode ending at step t has earned the sum up to
        t less the sum up to its env's previous end (or, for the first, plus what it had earned
        before this rollout)."""
        steps = rewards.shape[0]
        totals = self.running_return + rewards.cumsum(0)
        step_index = torch.arange(steps, device=rewards.device)[:, None]
        lengths = self.running_length + step_index + 1
        # Each env's latest end at or before t (-1: none yet), then strictly before t.
        last_end = torch.where(dones, step_index, -1).cummax(0).values
        previous_end = torch.cat((torch.full_like(last_end[:1], -1), last_end[:-1]))
        returns = totals - _value_at(totals, previous_end)
        episode_lengths = lengths - _value_at(lengths, previous_end)
        # An env's first end here closes the episode it had running, which was cut if ``cut``.
        counted = dones & ~(self.cut & (previous_end < 0))
        self.cut &= ~dones.any(0)
        # Step by step, env by env: the order in which the episodes ended.
        self.returns.extend(returns[counted].tolist())
        self.lengths.extend(episode_lengths[counted].tolist())
        self.finished += int(counted.sum())
        self.running_return = totals[-1] - _value_at(totals, last_end[-1:])[0]
        self.running_length = lengths[-1] - _value_at(lengths, last_end[-1:])[0]


def _value_at(values: torch.Tensor, steps: torch.Tensor) -> torch.Tensor:
    """``values[steps[t, i], i]``, and 0 where ``steps`` is -1 (no end yet)."""
    picked = values.gather(0, steps.clamp(min=0))
    return torch.where(steps >= 0, picked, torch.zeros_like(picked))
