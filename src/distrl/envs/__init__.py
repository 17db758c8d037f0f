"""Environment construction behind one interface, with a backend switch (``env.backend``).

Importing the package costs no torch: an env stepped in a process of its own (``gymnasium_async``)
imports modules of this package (its observation check) and needs none of it. ``StepResult`` and
``VecEnv`` are imported from ``distrl.envs.base`` on first use (PEP 562)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from distrl.config.sections import EnvConfig
from distrl.env_backends import ENV_BACKENDS
from distrl.env_packages import import_env_packages
from distrl.errors import UserError
from distrl.user_code import load

if TYPE_CHECKING:
    import torch

    from distrl.config.run import RunConfig
    from distrl.envs.base import StepResult, VecEnv

    VecEnvBuilder = Callable[[EnvConfig, Sequence[int], torch.device], VecEnv]

__all__ = ["StepResult", "VecEnv", "check_config_env", "check_env", "make_vec_env"]


def __getattr__(name: str) -> Any:
    if name in ("StepResult", "VecEnv"):
        from distrl.envs import base

        return getattr(base, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def make_vec_env(cfg: EnvConfig, seeds: Sequence[int], device: torch.device | None = None) -> VecEnv:
    """Build ``len(seeds)`` envs (env i seeded from ``seeds[i]``) and check their spaces. Batched
    torch envs live on ``device`` (default CPU); host backends stay on the CPU."""
    import torch  # here, not at the top: see the module's docstring

    import_env_packages(cfg.imports)
    backend = ENV_BACKENDS[cfg.backend]
    backend.require_packages()  # optional: one line naming the extra, before the import
    build: VecEnvBuilder = load(backend.builder)
    env = build(cfg, seeds, device or torch.device("cpu"))
    _check_spaces(cfg, env)
    return env


def check_env(cfg: EnvConfig) -> None:
    """Build one env and check its spaces, so a bad env fails before any process group or run dir."""
    make_vec_env(cfg, [0]).close()


def check_config_env(cfg: RunConfig) -> None:
    """``check_env`` of a run's env (the algorithm registry's ``input_check`` for env learners)."""
    check_env(cfg.env)


def _check_spaces(cfg: EnvConfig, env: VecEnv) -> None:
    env_id, obs_space, act_space = cfg.id, env.observation_space, env.action_space
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) not in (1, 3):
        raise UserError(
            f"env {env_id!r}: observation space {obs_space} is not supported (a Box of features, "
            "or of an image: height, width and channels in either order)",
            code="env-observation-space-unsupported",
        )
    if len(obs_space.shape) == 3 and not ENV_BACKENDS[cfg.backend].images:
        with_images = [backend.name for backend in ENV_BACKENDS.values() if backend.images]
        raise UserError(
            f"env {env_id!r}: observation space {obs_space} is not supported with env.backend={cfg.backend} "
            f"(feature vectors only; image observations come from the {', '.join(with_images)} backends)",
            code="env-observation-space-backend",
        )
    if not isinstance(act_space, gym.spaces.Discrete | gym.spaces.MultiDiscrete | gym.spaces.Box):
        raise UserError(
            f"env {env_id!r}: action space {act_space} is not supported (Discrete, MultiDiscrete or Box)",
            code="env-action-space-unsupported",
        )
    if not isinstance(act_space, gym.spaces.Discrete) and len(act_space.shape) != 1:
        raise UserError(
            f"env {env_id!r}: action space {act_space} must be flat (one axis)",
            code="env-action-space-not-flat",
        )
    if np.any(getattr(act_space, "start", 0) != 0):
        raise UserError(
            f"env {env_id!r}: action space {act_space} must count its actions from 0 (start=0)",
            code="env-action-space-start",
        )
