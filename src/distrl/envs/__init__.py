"""Environment construction behind one interface, with a backend switch."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

import gymnasium as gym

from distrl.config import EnvConfig
from distrl.envs.base import StepResult, VecEnv
from distrl.envs.gymnasium_backend import GymnasiumVecEnv
from distrl.envs.torch_backend import TORCH_ENVS, TorchBackendVecEnv
from distrl.errors import UserError

__all__ = ["StepResult", "VecEnv", "check_env", "env_factory", "make_vec_env"]


def env_factory(cfg: EnvConfig) -> Callable[[], gym.Env]:
    """Return a constructor for one env: a registered Gymnasium id or ``module:Class``."""
    if ":" in cfg.id:
        env_cls = _import_env_class(cfg.id)

        def make_custom() -> gym.Env:
            env = env_cls(**cfg.kwargs)
            if cfg.max_episode_steps is not None:
                env = gym.wrappers.TimeLimit(env, cfg.max_episode_steps)
            return env

        return make_custom
    try:
        gym.spec(cfg.id)
    except gym.error.Error as exc:
        raise UserError(f"env.id {cfg.id!r}: {exc}") from None
    return lambda: gym.make(cfg.id, max_episode_steps=cfg.max_episode_steps, **cfg.kwargs)


def make_vec_env(cfg: EnvConfig, seeds: Sequence[int]) -> VecEnv:
    """Build ``len(seeds)`` envs, env i seeded with ``seeds[i]``, and check their spaces."""
    if cfg.backend == "torch":
        return _torch_vec_env(cfg, seeds)
    make_env = env_factory(cfg)
    try:
        vec_env = GymnasiumVecEnv(make_env, seeds)
    except (TypeError, gym.error.Error) as exc:
        raise UserError(f"env {cfg.id!r} could not be created: {exc}") from None
    _check_spaces(cfg.id, vec_env)
    return vec_env


def _torch_vec_env(cfg: EnvConfig, seeds: Sequence[int]) -> VecEnv:
    if cfg.id not in TORCH_ENVS:
        raise UserError(f"env.backend=torch implements {', '.join(TORCH_ENVS)}, not {cfg.id!r}")
    try:
        return TorchBackendVecEnv(TORCH_ENVS[cfg.id], seeds, cfg.max_episode_steps, **cfg.kwargs)
    except TypeError as exc:
        raise UserError(f"env {cfg.id!r} (torch backend) could not be created: {exc}") from None


def check_env(cfg: EnvConfig) -> None:
    """Build one env and check its spaces, so a bad env fails before any process group or run dir."""
    make_vec_env(cfg, [0]).close()


def _check_spaces(env_id: str, env: VecEnv) -> None:
    obs_space, act_space = env.observation_space, env.action_space
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
        raise UserError(
            f"env {env_id!r}: observation space {obs_space} is not supported "
            "(PPO's MLP policy needs a flat Box)"
        )
    if not isinstance(act_space, gym.spaces.Discrete | gym.spaces.Box):
        raise UserError(f"env {env_id!r}: action space {act_space} is not supported (Discrete or Box only)")
    if isinstance(act_space, gym.spaces.Box) and len(act_space.shape) != 1:
        raise UserError(f"env {env_id!r}: action space {act_space} must be a flat Box")


def _import_env_class(spec: str) -> type[gym.Env]:
    module_name, _, class_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(f"env.id {spec!r}: cannot import module {module_name!r}: {exc}") from None
    env_cls = getattr(module, class_name, None)
    if env_cls is None:
        raise UserError(f"env.id {spec!r}: module {module_name!r} has no attribute {class_name!r}")
    return env_cls
