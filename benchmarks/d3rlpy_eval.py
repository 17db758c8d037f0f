"""The greedy evaluation both d3rlpy contender scripts (``d3rlpy_iql.py``, ``d3rlpy_offline_dqn.py``)
run in d3rlpy's own venv: the same episodes on the same seeds as ``distrl eval``."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


def greedy_return(algo: Any, env_id: str, episodes: int, first_seed: int) -> float:
    """Mean undiscounted return of ``algo.predict``'s actions, episode i seeded ``first_seed`` + i."""
    env = gym.make(env_id)
    returns = []
    for i in range(episodes):
        obs, _ = env.reset(seed=first_seed + i)
        total, done = 0.0, False
        while not done:
            action = algo.predict(np.asarray(obs, np.float32)[None])[0]
            obs, reward, terminated, truncated, _ = env.step(action)
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    env.close()
    return float(np.mean(returns))
