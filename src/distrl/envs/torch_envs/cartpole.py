"""CartPole-v1 as a batched torch env, step for step Gymnasium's ``CartPoleEnv`` (Euler integrator)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from distrl.envs.torch_envs.base import TorchVecEnv

GRAVITY = 9.8
MASS_CART = 1.0
MASS_POLE = 0.1
TOTAL_MASS = MASS_POLE + MASS_CART
HALF_POLE_LENGTH = 0.5
POLE_MASS_LENGTH = MASS_POLE * HALF_POLE_LENGTH
FORCE_MAG = 10.0
TAU_S = 0.02
THETA_THRESHOLD_RAD = 12 * 2 * math.pi / 360  # written as Gymnasium writes it, for the same rounding
X_THRESHOLD = 2.4


class TorchCartPole(TorchVecEnv):
    """Push the cart left (action 0) or right (1); reward 1 per step, including the terminal one."""

    initial_state_bound = (0.05, 0.05, 0.05, 0.05)
    default_max_episode_steps = 500
    _obs_high = np.array([X_THRESHOLD * 2, np.inf, THETA_THRESHOLD_RAD * 2, np.inf], dtype=np.float32)
    observation_space = gym.spaces.Box(-_obs_high, _obs_high, dtype=np.float32)
    action_space = gym.spaces.Discrete(2)

    def _transition(
        self, state: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x, x_dot, theta, theta_dot = state.unbind(dim=1)
        force = torch.where(actions == 1, FORCE_MAG, -FORCE_MAG).to(self.dtype)
        cos_theta = torch.cos(theta)
        sin_theta = torch.sin(theta)
        # Same operation order as Gymnasium, so float64 results agree to the last bits.
        temp = (force + POLE_MASS_LENGTH * theta_dot**2 * sin_theta) / TOTAL_MASS
        theta_acc = (GRAVITY * sin_theta - cos_theta * temp) / (
            HALF_POLE_LENGTH * (4.0 / 3.0 - MASS_POLE * cos_theta**2 / TOTAL_MASS)
        )
        x_acc = temp - POLE_MASS_LENGTH * theta_acc * cos_theta / TOTAL_MASS
        next_state = torch.stack(
            (
                x + TAU_S * x_dot,
                x_dot + TAU_S * x_acc,
                theta + TAU_S * theta_dot,
                theta_dot + TAU_S * theta_acc,
            ),
            dim=1,
        )
        next_x, next_theta = next_state[:, 0], next_state[:, 2]
        terminated = (next_x.abs() > X_THRESHOLD) | (next_theta.abs() > THETA_THRESHOLD_RAD)
        reward = torch.ones(self.num_envs, dtype=self.dtype, device=self.device)
        return next_state, reward, terminated

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        return state.to(torch.float32)
