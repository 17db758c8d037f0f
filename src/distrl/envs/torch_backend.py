"""``env.backend: torch``: distrl's batched torch envs (``envs.torch_envs``) behind the numpy
VecEnv interface. The batch steps in a handful of tensor ops instead of a Python loop over envs;
on the CPU the arrays handed to the runner are the tensors' own memory (no copy). Keeping
rollouts on a GPU without the host round trip is the next step (the runners take numpy today).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from distrl.envs.base import StepResult
from distrl.envs.torch_envs import TorchAcrobot, TorchCartPole, TorchPendulum, TorchVecEnv

TORCH_ENVS: dict[str, type[TorchVecEnv]] = {
    "CartPole-v1": TorchCartPole,
    "Acrobot-v1": TorchAcrobot,
    "Pendulum-v1": TorchPendulum,
}
"""Gymnasium ids the torch backend implements, with the same dynamics, rewards and time limits."""


class TorchBackendVecEnv:
    """The batch is seeded once, from the first env's seed (``seed + its global index``), so
    ranks differ; env i is not seeded ``seeds[i]`` as the Gymnasium backend seeds it."""

    def __init__(
        self, env_class: type[TorchVecEnv], seeds: Sequence[int], max_episode_steps: int | None, **kwargs: Any
    ) -> None:
        self._env = env_class(len(seeds), seed=int(seeds[0]), max_episode_steps=max_episode_steps, **kwargs)
        self.num_envs = len(seeds)
        self.observation_space = self._env.observation_space
        self.action_space = self._env.action_space

    def reset(self) -> np.ndarray:
        return self._env.reset().numpy()

    def step(self, actions: np.ndarray) -> StepResult:
        result = self._env.step(torch.as_tensor(actions))
        return StepResult(*(tensor.numpy() for tensor in result))

    def close(self) -> None:
        """Nothing to release: the batch is tensors."""
