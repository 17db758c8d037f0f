"""Batched classic-control envs whose state is one torch tensor ``[num_envs, state_dim]`` on a device.

Every step advances all envs with a few tensor ops and auto-resets on the same step, with the
semantics of distrl's Gymnasium backend: where an episode ended, ``obs`` already holds the next
episode's first observation and ``final_obs`` the observation the step led to (for bootstrapping
truncations). Nothing here synchronises with the host, so a step can run asynchronously on a GPU.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import gymnasium as gym
import torch

from distrl.envs.base import StepResult


class TorchVecEnv(ABC):
    """A batch of one classic-control task; subclasses supply the dynamics, this class the episodes.

    ``dtype`` is the dtype of the internal state. float64 follows Gymnasium (which integrates in
    Python floats) to rounding over whole episodes. float32 (the default) halves memory traffic and is
    fast on every GPU; it simulates the same dynamics, but trajectories of the chaotic Acrobot and of
    Pendulum drift from Gymnasium's over hundreds of steps, as any float32 simulation would.
    Observations and rewards are float32 either way.
    """

    initial_state_bound: ClassVar[tuple[float, ...]]
    """Each state component of a new episode is drawn uniformly from ``[-bound, bound]``."""
    default_max_episode_steps: ClassVar[int]
    """Gymnasium's registered time limit for the task."""
    observation_space: gym.spaces.Box
    """Space of one env's observation."""
    action_space: gym.spaces.Space
    """Space of one env's action (Discrete or Box)."""

    def __init__(
        self,
        num_envs: int,
        *,
        device: torch.device | str = "cpu",
        seed: int = 0,
        dtype: torch.dtype = torch.float32,
        max_episode_steps: int | None = None,
    ) -> None:
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.dtype = dtype
        self.max_episode_steps = (
            self.default_max_episode_steps if max_episode_steps is None else max_episode_steps
        )
        self._generator = torch.Generator(device=self.device)
        self._generator.manual_seed(seed)
        self._initial_state_bound = torch.tensor(self.initial_state_bound, dtype=dtype, device=self.device)
        self.state = self._sample_initial_state()
        self.episode_steps = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        """Steps taken in each env's current episode (for the time limit)."""

    def reset(self) -> torch.Tensor:
        """Start a new episode in every env and return the first observations."""
        self.state = self._sample_initial_state()
        self.episode_steps.zero_()
        return self._observe(self.state)

    def set_state(self, state: torch.Tensor, episode_steps: torch.Tensor | None = None) -> None:
        """Set every env's state exactly (and its step count, default 0), e.g. to mirror another env."""
        self.state = state.to(device=self.device, dtype=self.dtype).clone()
        if episode_steps is None:
            self.episode_steps.zero_()
        else:
            self.episode_steps = episode_steps.to(device=self.device, dtype=torch.int64).clone()

    def step(self, actions: torch.Tensor) -> StepResult:
        """Advance every env one step with ``actions`` (``[num_envs]`` or ``[num_envs, act_dim]``)."""
        next_state, reward, terminated = self._transition(self.state, actions.to(self.device))
        self.episode_steps += 1
        truncated = self.episode_steps >= self.max_episode_steps
        done = terminated | truncated
        # A fresh state for every env, used where done, keeps the step free of host syncs and
        # data-dependent shapes; the draws stay reproducible because their count never varies.
        self.state = torch.where(done[:, None], self._sample_initial_state(), next_state)
        self.episode_steps.masked_fill_(done, 0)
        return StepResult(
            obs=self._observe(self.state),
            reward=reward.to(torch.float32),
            terminated=terminated,
            truncated=truncated,
            final_obs=self._observe(next_state),
        )

    def close(self) -> None:  # noqa: B027 (a concrete no-op, not a hook to override)
        """Nothing to release: the batch is tensors."""

    def _sample_initial_state(self) -> torch.Tensor:
        unit = torch.rand(
            self.num_envs,
            len(self.initial_state_bound),
            generator=self._generator,
            dtype=self.dtype,
            device=self.device,
        )
        return (2 * unit - 1) * self._initial_state_bound

    @abstractmethod
    def _transition(
        self, state: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Return ``(next_state, reward, terminated)`` for a batch of states and actions."""

    @abstractmethod
    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        """Return the float32 observations ``[num_envs, obs_dim]`` of a batch of states."""
