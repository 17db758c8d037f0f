"""Partially observed tasks, where a policy needs memory (``model.memory``) to do well.

``env.id: distrl.envs.memory_tasks:CartPoleNoVelocity`` with ``env.max_episode_steps: 500`` is
CartPole-v1 showing only the cart's position and the pole's angle (rl-zoo's CartPoleNoVel-v1): the
velocities must be inferred from successive observations.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control import CartPoleEnv

POSITIONS = np.array([0, 2])
"""Of CartPole's (position, velocity, angle, angular velocity): the ones shown."""


class CartPoleNoVelocity(gym.ObservationWrapper):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(CartPoleEnv(**kwargs))
        full = self.env.observation_space
        self.observation_space = gym.spaces.Box(full.low[POSITIONS], full.high[POSITIONS], dtype=np.float32)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return observation[POSITIONS]
