"""The one vectorised-environment interface runners and evaluators use.

Every backend speaks torch tensors on its ``device``: Gymnasium and EnvPool hand over their numpy
arrays as CPU tensors (no copy where the dtype already matches), batched torch envs keep theirs on
the rank's device, so a GPU rollout never leaves the GPU. Auto-reset happens on the same step:
when an episode ends, ``obs`` already holds the next episode's first observation and ``final_obs``
holds the last observation of the finished one (needed to bootstrap truncations).
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import gymnasium as gym
import numpy as np
import torch

from distrl.envs.dict_obs import PackedDict


class StepResult(NamedTuple):
    obs: torch.Tensor
    """``[num_envs, *obs_shape]``, float32 (integer images: their own dtype, ``obs_tensor_dtype``);
    the next episode's first observation where one ended."""
    reward: torch.Tensor
    """``[num_envs]`` float32."""
    terminated: torch.Tensor
    """``[num_envs]`` bool."""
    truncated: torch.Tensor
    """``[num_envs]`` bool: the time limit was reached (may coincide with ``terminated``)."""
    final_obs: torch.Tensor
    """Like ``obs``: the observation this step led to, before any reset."""
    life_lost: torch.Tensor | None = None
    """``[num_envs]`` bool, from games with lives under episodic life (``env.backend: ale``): the
    agent's episode ended here for learning (nothing is bootstrapped past it), but the game, the
    episode the statistics count, goes on. None: no such ends."""


def obs_array_dtype(space: gym.spaces.Space) -> np.dtype:
    """What a backend hands observations over as: an integer image (uint8 frames) keeps its
    dtype, so it is stored and sent at its own size, and so does a packed Dict (uint8 when all
    its keys fit a byte); everything else is float32."""
    if isinstance(space, PackedDict):
        return space.dtype
    image = isinstance(space, gym.spaces.Box) and len(space.shape) == 3
    return space.dtype if image and np.issubdtype(space.dtype, np.integer) else np.dtype(np.float32)


def obs_tensor_dtype(space: gym.spaces.Space) -> torch.dtype:
    """``obs_array_dtype`` as a torch dtype."""
    return torch.from_numpy(np.zeros(0, obs_array_dtype(space))).dtype


def host_tensor(array: np.ndarray, dtype: type) -> torch.Tensor:
    """A host backend's array as a CPU tensor of ``dtype``; no copy when it has that dtype already
    (numpy's cast is cheaper than torch's for the few-element arrays of a small batch)."""
    return torch.from_numpy(np.asarray(array, dtype=dtype))


class VecEnv(Protocol):
    num_envs: int
    device: torch.device
    """Where observations, rewards and flags live and where actions are expected."""
    observation_space: gym.spaces.Box
    """Space of one env's observation."""
    action_space: gym.spaces.Space
    """Space of one env's action (Discrete or Box)."""

    def reset(self) -> torch.Tensor: ...

    def step(self, actions: torch.Tensor) -> StepResult:
        """``actions``: ``[num_envs]`` int64 (Discrete) or ``[num_envs, act_dim]`` float32 (Box)."""
        ...

    def close(self) -> None: ...
