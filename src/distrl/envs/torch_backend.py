"""``env.backend: torch``: batched envs whose tensors live on the rank's device, so observations,
rewards, dones and actions never leave it: distrl's own CartPole-v1, Acrobot-v1 and Pendulum-v1
(``envs.torch_envs``), or a user's class with rsl_rl's VecEnv interface given as ``module:Class``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from distrl.envs.base import VecEnv
from distrl.envs.rsl_rl_style import build_rsl_rl_style_env
from distrl.envs.torch_envs import TorchAcrobot, TorchCartPole, TorchPendulum, TorchVecEnv
from distrl.envs.user_class import import_env_class, is_class_spec
from distrl.errors import UserError

if TYPE_CHECKING:
    from distrl.config.sections import EnvConfig

TORCH_ENVS: dict[str, type[TorchVecEnv]] = {
    "CartPole-v1": TorchCartPole,
    "Acrobot-v1": TorchAcrobot,
    "Pendulum-v1": TorchPendulum,
}
"""Gymnasium ids the torch backend implements, with the same dynamics, rewards and time limits."""


def make_torch_vec_env(cfg: EnvConfig, seeds: Sequence[int], device: torch.device) -> VecEnv:
    """The batch is seeded once, from the first env's seed (``seed + its global index``), so
    ranks differ; env i is not seeded ``seeds[i]`` as the Gymnasium backend seeds it."""
    build = _user_env if is_class_spec(cfg.id) else _built_in_env
    try:
        return build(cfg, len(seeds), device, int(seeds[0]))
    except TypeError as exc:
        raise UserError(
            f"env {cfg.id!r} (torch backend) could not be created: {exc}", code="env-create-failed"
        ) from None


def _built_in_env(cfg: EnvConfig, num_envs: int, device: torch.device, seed: int) -> VecEnv:
    if cfg.id not in TORCH_ENVS:
        raise UserError(
            f"env.backend=torch implements {', '.join(TORCH_ENVS)} or a user's module:Class, not {cfg.id!r}",
            code="env-id-unknown",
        )
    return TORCH_ENVS[cfg.id](
        num_envs, device=device, seed=seed, max_episode_steps=cfg.max_episode_steps, **cfg.kwargs
    )


def _user_env(cfg: EnvConfig, num_envs: int, device: torch.device, seed: int) -> VecEnv:
    if cfg.max_episode_steps is not None:
        raise UserError(
            f"env.max_episode_steps: {cfg.id!r} is a user's torch env, which keeps its own time limit; "
            "unset env.max_episode_steps",
            code="env-torch-max-episode-steps",
        )
    return build_rsl_rl_style_env(import_env_class(cfg.id), cfg.id, num_envs, device, seed, cfg.kwargs)
