"""Acrobot-v1 as a batched torch env, step for step Gymnasium's ``AcrobotEnv`` ("book" dynamics, RK4)."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import torch

from distrl.envs.torch_envs.base import TorchVecEnv

DT_S = 0.2
LINK_LENGTH_1 = 1.0
LINK_MASS_1 = 1.0
LINK_MASS_2 = 1.0
LINK_COM_POS_1 = 0.5
LINK_COM_POS_2 = 0.5
LINK_MOI = 1.0
GRAVITY = 9.8
MAX_VEL_1 = 4 * math.pi
MAX_VEL_2 = 9 * math.pi


class TorchAcrobot(TorchVecEnv):
    """Raise the tip over the bar with torque -1, 0, +1 (actions 0, 1, 2); reward -1, 0 at the goal."""

    initial_state_bound = (0.1, 0.1, 0.1, 0.1)
    default_max_episode_steps = 500
    _obs_high = np.array([1.0, 1.0, 1.0, 1.0, MAX_VEL_1, MAX_VEL_2], dtype=np.float32)
    observation_space = gym.spaces.Box(-_obs_high, _obs_high, dtype=np.float32)
    action_space = gym.spaces.Discrete(3)

    def _sample_initial_state(self) -> torch.Tensor:
        # Gymnasium casts its initial state to float32; round the same way so the draws are alike.
        return super()._sample_initial_state().to(torch.float32).to(self.dtype)

    def _transition(
        self, state: torch.Tensor, actions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        torque = actions.to(self.dtype) - 1.0
        next_state = _rk4_step(state, torque)
        theta_1, theta_2, dtheta_1, dtheta_2 = next_state.unbind(dim=1)
        next_state = torch.stack(
            (
                _wrap(theta_1, -math.pi, math.pi),
                _wrap(theta_2, -math.pi, math.pi),
                dtheta_1.clamp(-MAX_VEL_1, MAX_VEL_1),
                dtheta_2.clamp(-MAX_VEL_2, MAX_VEL_2),
            ),
            dim=1,
        )
        theta_1, theta_2 = next_state[:, 0], next_state[:, 1]
        terminated = -torch.cos(theta_1) - torch.cos(theta_2 + theta_1) > 1.0
        reward = torch.where(terminated, 0.0, -1.0).to(self.dtype)
        return next_state, reward, terminated

    def _observe(self, state: torch.Tensor) -> torch.Tensor:
        theta_1, theta_2, dtheta_1, dtheta_2 = state.unbind(dim=1)
        return torch.stack(
            (
                torch.cos(theta_1),
                torch.sin(theta_1),
                torch.cos(theta_2),
                torch.sin(theta_2),
                dtheta_1,
                dtheta_2,
            ),
            dim=1,
        ).to(torch.float32)


def _rk4_step(state: torch.Tensor, torque: torch.Tensor) -> torch.Tensor:
    """One classic Runge-Kutta step of ``DT_S`` with the torque held constant, as Gymnasium's ``rk4``."""
    half_dt = DT_S / 2.0
    k1 = _state_derivative(state, torque)
    k2 = _state_derivative(state + half_dt * k1, torque)
    k3 = _state_derivative(state + half_dt * k2, torque)
    k4 = _state_derivative(state + DT_S * k3, torque)
    return state + DT_S / 6.0 * (k1 + 2 * k2 + 2 * k3 + k4)


def _state_derivative(state: torch.Tensor, torque: torch.Tensor) -> torch.Tensor:
    """Gymnasium's ``_dsdt`` with the book dynamics, in its operation order (for float64 agreement)."""
    m1, m2, l1, lc1, lc2, i1, i2 = (
        LINK_MASS_1,
        LINK_MASS_2,
        LINK_LENGTH_1,
        LINK_COM_POS_1,
        LINK_COM_POS_2,
        LINK_MOI,
        LINK_MOI,
    )
    theta_1, theta_2, dtheta_1, dtheta_2 = state.unbind(dim=1)
    d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * torch.cos(theta_2)) + i1 + i2
    d2 = m2 * (lc2**2 + l1 * lc2 * torch.cos(theta_2)) + i2
    phi2 = m2 * lc2 * GRAVITY * torch.cos(theta_1 + theta_2 - math.pi / 2.0)
    phi1 = (
        -m2 * l1 * lc2 * dtheta_2**2 * torch.sin(theta_2)
        - 2 * m2 * l1 * lc2 * dtheta_2 * dtheta_1 * torch.sin(theta_2)
        + (m1 * lc1 + m2 * l1) * GRAVITY * torch.cos(theta_1 - math.pi / 2)
        + phi2
    )
    ddtheta_2 = (torque + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta_1**2 * torch.sin(theta_2) - phi2) / (
        m2 * lc2**2 + i2 - d2**2 / d1
    )
    ddtheta_1 = -(d2 * ddtheta_2 + phi1) / d1
    return torch.stack((dtheta_1, dtheta_2, ddtheta_1, ddtheta_2), dim=1)


def _wrap(angle: torch.Tensor, low: float, high: float) -> torch.Tensor:
    """Shift into ``[low, high]`` by whole periods, as Gymnasium's loop ``wrap`` does.

    One period's shift is the same single subtraction Gymnasium makes, so float64 results agree.
    """
    period = high - low
    periods_above = torch.ceil((angle - high) / period).clamp(min=0)
    periods_below = torch.ceil((low - angle) / period).clamp(min=0)
    return angle - period * periods_above + period * periods_below
