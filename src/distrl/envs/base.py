"""The one vectorised-environment interface runners and evaluators use.

Backends (Gymnasium, batched torch envs) return plain numpy arrays with auto-reset on the same
step: when an episode ends, ``obs`` already holds the next episode's first observation and
``final_obs`` holds the last observation of the finished one (needed to bootstrap truncations).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import gymnasium as gym
import numpy as np


@dataclass
class StepResult:
    obs: np.ndarray
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    final_obs: np.ndarray
    """Last observation of each env whose episode ended this step (rows of other envs undefined)."""


class VecEnv(Protocol):
    num_envs: int
    observation_space: gym.spaces.Box
    """Space of one env's observation."""
    action_space: gym.spaces.Space
    """Space of one env's action (Discrete or Box)."""

    def reset(self) -> np.ndarray: ...

    def step(self, actions: np.ndarray) -> StepResult: ...

    def close(self) -> None: ...
