"""``env.backend: gymnax``: gymnax's JAX envs as distrl ``JaxEnv``s (``distrl.envs.jax_envs``),
stepped by the JAX VecEnv or inside a compiled training loop.

The step calls gymnax's ``env.step_env`` (no auto-reset: ``jax_envs.step_envs`` resets where an
episode ended, on the same step). gymnax 1.0.1 reports natural terminations from ``step_env`` and
time limits separately, through ``env.is_truncated(state)``: the stepped state's time counter has
reached ``env_params.max_steps_in_episode``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch

from distrl.envs.jax_envs import CompiledEnv, JaxVecEnv, compile_env
from distrl.errors import UserError

if TYPE_CHECKING:
    import gymnasium as gym
    import jax

    from distrl.config.sections import EnvConfig

TIME_LIMIT_PARAM = "max_steps_in_episode"
"""The gymnax env parameter ``env.max_episode_steps`` sets."""


def make_gymnax_vec_env(
    cfg: EnvConfig, seeds: Sequence[int], device: torch.device | None = None
) -> JaxVecEnv:
    """gymnax steps on JAX's CPU device here: ``device`` is ignored, the runner moves what it needs.

    ``cfg.kwargs`` naming fields of the env's params (e.g. CartPole-v1's ``gravity``) replace
    them; the rest go to the env's constructor through ``gymnax.make``.
    """
    gymnax = _import_gymnax()
    if cfg.id not in gymnax.registered_envs:
        raise UserError(
            f"env.id {cfg.id!r} is not a gymnax env (env.backend=gymnax); gymnax has: "
            f"{', '.join(gymnax.registered_envs)}",
            code="env-id-unknown",
        )
    if TIME_LIMIT_PARAM in cfg.kwargs:
        raise UserError(
            f"env.kwargs {TIME_LIMIT_PARAM}: set the time limit with env.max_episode_steps",
            code="env-kwargs-time-limit",
        )
    default_params = gymnax.make(cfg.id)[1]
    param_names = {field.name for field in dataclasses.fields(default_params)}
    param_kwargs = {k: v for k, v in cfg.kwargs.items() if k in param_names}
    if cfg.max_episode_steps is not None:
        param_kwargs[TIME_LIMIT_PARAM] = cfg.max_episode_steps
    constructor_kwargs = {k: v for k, v in cfg.kwargs.items() if k not in param_names}
    try:
        compiled = _compiled_env(cfg.id, json.dumps(constructor_kwargs, sort_keys=True))
    except TypeError as exc:
        settable = ", ".join(sorted(param_names - {TIME_LIMIT_PARAM}))
        raise UserError(
            f"env {cfg.id!r} (gymnax backend) could not be created: {exc} "
            f"(env.kwargs may also set these params: {settable})",
            code="env-create-failed",
        ) from None
    return JaxVecEnv(compiled, default_params.replace(**param_kwargs), seeds)


@dataclasses.dataclass(frozen=True)
class GymnaxEnv:
    """A gymnax ``Environment`` as a ``JaxEnv``; ``params`` are its env params."""

    env: Any

    @property
    def name(self) -> str:
        return self.env.name

    def reset(self, params: Any, key: jax.Array) -> tuple[jax.Array, Any]:
        import jax.numpy as jnp

        obs, state = self.env.reset_env(key, params)
        return jnp.asarray(obs, jnp.float32), state

    def step(self, params: Any, key: jax.Array, state: Any, action: jax.Array) -> tuple[Any, ...]:
        import jax.numpy as jnp

        obs, next_state, reward, terminated, _ = self.env.step_env(key, state, action, params)
        truncated = jnp.asarray(self.env.is_truncated(next_state, params), jnp.bool_)
        return (
            jnp.asarray(obs, jnp.float32),
            next_state,
            jnp.asarray(reward, jnp.float32),
            jnp.asarray(terminated, jnp.bool_),
            truncated,
        )

    def spaces(self, params: Any) -> tuple[gym.spaces.Space, gym.spaces.Space]:
        from gymnax.environments.spaces import gymnax_space_to_gym_space

        try:
            return (
                gymnax_space_to_gym_space(self.env.observation_space(params)),
                gymnax_space_to_gym_space(self.env.action_space(params)),
            )
        except NotImplementedError as exc:
            raise UserError(
                f"env {self.name!r} (gymnax backend): {exc}", code="env-gymnax-space-unsupported"
            ) from None


@functools.cache
def _compiled_env(env_id: str, constructor_json: str) -> CompiledEnv:
    """One per id and constructor arguments in a process (a compilation costs ~1 s)."""
    return compile_env(GymnaxEnv(_import_gymnax().make(env_id, **json.loads(constructor_json))[0]))


def _import_gymnax() -> ModuleType:
    import gymnax

    return gymnax
