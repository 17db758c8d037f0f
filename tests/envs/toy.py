"""A user-style env given as ``tests.envs.toy:CountingEnv``: a counter that never terminates."""

from __future__ import annotations

import gymnasium as gym
import numpy as np


class CountingEnv(gym.Env):
    """Observation = steps taken so far; reward 1 every step; only a time limit ends episodes."""

    def __init__(self, scale: float = 1.0) -> None:
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.scale = scale
        self.count = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.count = 0
        return self._obs(), {}

    def step(self, action):
        self.count += 1
        return self._obs(), 1.0, False, False, {}

    def _obs(self) -> np.ndarray:
        return np.array([self.count * self.scale, 1.0], dtype=np.float32)


class BrokenSensorEnv(CountingEnv):
    """Like CountingEnv, but after ``healthy_steps`` steps every observation is NaN."""

    def __init__(self, healthy_steps: int = 100) -> None:
        super().__init__()
        self.healthy_steps = healthy_steps
        self.total_steps = 0

    def step(self, action):
        self.total_steps += 1
        obs, reward, terminated, truncated, info = super().step(action)
        if self.total_steps > self.healthy_steps:
            obs = np.full_like(obs, np.nan)
        return obs, reward, terminated, truncated, info
