"""Gymnasium SyncVectorEnv backend (in-process; on few cores it beats subprocess vector envs)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from distrl.envs.base import StepResult


class GymnasiumVecEnv:
    """SyncVectorEnv with same-step auto-reset, seeded once with one distinct seed per env."""

    def __init__(self, make_env: Callable[[], gym.Env], seeds: Sequence[int]) -> None:
        self._env = SyncVectorEnv([make_env for _ in seeds], autoreset_mode=AutoresetMode.SAME_STEP)
        self._seeds = [int(s) for s in seeds]
        self.num_envs = len(self._seeds)
        self.observation_space = self._env.single_observation_space
        self.action_space = self._env.single_action_space

    def reset(self) -> np.ndarray:
        obs, _ = self._env.reset(seed=self._seeds)
        return obs

    def step(self, actions: np.ndarray) -> StepResult:
        obs, reward, terminated, truncated, info = self._env.step(actions)
        final_obs = obs.copy()
        if "_final_obs" in info:
            for i in np.flatnonzero(info["_final_obs"]):
                final_obs[i] = info["final_obs"][i]
        return StepResult(obs, reward, terminated, truncated, final_obs)

    def close(self) -> None:
        self._env.close()
