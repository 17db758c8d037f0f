"""``env.backend: brax``: Brax's physics envs (``env.id: inverted_pendulum``, ``halfcheetah``,
``ant``, ...) as distrl ``JaxEnv``s (``distrl.envs.jax_envs``), stepped by the JAX VecEnv or
inside a compiled training loop.

Brax envs neither count steps nor reset themselves (its training wrappers do both); here the
state carries the episode's step count and ``params`` is the time limit (``env.max_episode_steps``,
default 1000, Brax's training default), so two limits share one compilation. Brax's ``done``
flag is a natural termination (e.g. the pendulum fell); actions are in [-1, 1].
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import json
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import torch

from distrl.envs.jax_envs import CompiledEnv, JaxVecEnv, compile_env
from distrl.errors import UserError
from distrl.quiet import quiet

if TYPE_CHECKING:
    import gymnasium as gym
    import jax

    from distrl.config.sections import EnvConfig

DEFAULT_EPISODE_STEPS = 1000


class BraxState(NamedTuple):
    physics: Any
    """Brax's own ``State`` (pipeline state, observation, reward, done, metrics, info)."""
    steps: jax.Array
    """Steps taken in this episode."""


@dataclasses.dataclass(frozen=True)
class BraxEnv:
    """A Brax ``Env`` as a ``JaxEnv``; ``params`` is the time limit in steps (an int32 array)."""

    env: Any
    name: str

    def reset(self, params: jax.Array, key: jax.Array) -> tuple[jax.Array, BraxState]:
        import jax.numpy as jnp

        physics = self.env.reset(key)
        return jnp.asarray(physics.obs, jnp.float32), BraxState(physics, jnp.int32(0))

    def step(self, params: jax.Array, key: jax.Array, state: BraxState, action: jax.Array) -> tuple[Any, ...]:
        import jax.numpy as jnp

        physics = self.env.step(state.physics, action)  # deterministic: no key
        steps = state.steps + 1
        return (
            jnp.asarray(physics.obs, jnp.float32),
            BraxState(physics, steps),
            jnp.asarray(physics.reward, jnp.float32),
            jnp.asarray(physics.done) > 0,
            steps >= params,
        )

    def spaces(self, params: jax.Array) -> tuple[gym.spaces.Space, gym.spaces.Space]:
        import gymnasium as gym
        import jax

        # Shapes only: Brax's own observation_size runs a reset eagerly (seconds).
        obs = jax.eval_shape(self.env.reset, jax.random.key(0)).obs
        return (
            gym.spaces.Box(-np.inf, np.inf, obs.shape, np.float32),
            gym.spaces.Box(-1.0, 1.0, (self.env.action_size,), np.float32),
        )


def make_brax_vec_env(cfg: EnvConfig, seeds: Sequence[int], device: torch.device | None = None) -> JaxVecEnv:
    """Brax steps on JAX's CPU device here: ``device`` is ignored, the runner moves what it needs.
    ``cfg.kwargs`` go to the env's constructor (e.g. ``backend: positional``)."""
    import jax.numpy as jnp

    names = sorted(_import_brax_envs()._envs)  # Brax's registry has no public listing
    if cfg.id not in names:
        raise UserError(
            f"env.id {cfg.id!r} is not a Brax env (env.backend=brax); Brax has: {', '.join(names)}",
            code="env-id-unknown",
        )
    try:
        compiled = _compiled_env(cfg.id, json.dumps(cfg.kwargs, sort_keys=True))
    except (TypeError, ValueError) as exc:
        raise UserError(
            f"env {cfg.id!r} (brax backend) could not be created from env.kwargs: {exc}",
            code="env-create-failed",
        ) from None
    limit = cfg.max_episode_steps or DEFAULT_EPISODE_STEPS
    return JaxVecEnv(compiled, jnp.int32(limit), seeds)


@functools.cache
def _compiled_env(env_id: str, kwargs_json: str) -> CompiledEnv:
    """One per id and constructor arguments in a process: Brax's physics compiles for seconds."""
    with quiet():  # Brax warns, for every env it builds, that it is no longer maintained
        env = _import_brax_envs().get_environment(env_id, **json.loads(kwargs_json))
    return compile_env(BraxEnv(env, env_id))


def _import_brax_envs() -> ModuleType:
    # MJX prints on stdout when NVIDIA Warp is missing (it is optional): that line would
    # land in the middle of `distrl eval --json`'s output.
    with contextlib.redirect_stdout(io.StringIO()), quiet():  # and jaxopt warns it is unmaintained
        from brax import envs
    return envs
