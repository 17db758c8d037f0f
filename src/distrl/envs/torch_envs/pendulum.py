"""Pendulum-v1 as a batched torch env, step for step Gymnasium's ``PendulumEnv``."""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from distrl.envs.torch_envs.base import TorchVecEnv

MAX_SPEED = 8.0
MAX_TORQUE = 2.0
DT_S = 0.05
MASS = 1.0
LENGTH = 1.0


class TorchPendulum(TorchVecEnv):
    """Swing up and hold a pendulum with a torque in [-2, 2]; it never terminates, only truncates."""

    initial_state_bound = (math.pi, 1.0)
    default_max_episode_steps = 200
    _obs_high = np.array([1.0, 1.0, MAX_SPEED], dtype=np.float32)
    observation_space = gym.spaces.Box(-_obs_high, _obs_high, dtype=np.float32)
    action_space = gym.spaces.Box(-MAX_TORQUE, MAX_TORQUE, shape=(1,), dtype=np.float32)

    def __init__(self, num_envs: int, *, g: float = 10.0, **kwargs: Any) -> None:
        """``g`` is the gravitational acceleration, Gymnasium's ``g`` keyword; ``kwargs`` are
        ``TorchVecEnv``'s."""
        super().__init__(num_envs, **kwargs)
        self.g = g

    def _transition(
        self, state: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        theta, theta_dot = state.unbind(dim=1)
        torque = actions[:, 0].to(self.dtype).clamp(-MAX_TORQUE, MAX_TORQUE)
        # The cost is taken on the state before the step, as Gymnasium does.
        costs = _normalize_angle(theta) ** 2 + 0.1 * theta_dot**2 + 0.001 * torque**2
        next_theta_dot = (
            theta_dot
            + (3 * self.g / (2 * LENGTH) * torch.sin(theta) + 3.0 / (MASS * LENGTH**2) * torque) * DT_S
        ).clamp(-MAX_SPEED, MAX_SPEED)
        next_theta = theta + next_theta_dot * DT_S
        terminated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        return torch.stack((next_theta, next_theta_dot), dim=1), -costs, terminated

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        theta, theta_dot = state.unbind(dim=1)
        return torch.stack((torch.cos(theta), torch.sin(theta), theta_dot), dim=1).to(torch.float32)


def _normalize_angle(angle: torch.Tensor) -> torch.Tensor:
    """Map to [-pi, pi) with a floored modulo, like Gymnasium's ``angle_normalize``."""
    return torch.remainder(angle + math.pi, 2 * math.pi) - math.pi
