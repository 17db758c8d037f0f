"""JAX-native envs (``env.backend: gymnax`` or ``brax``): one env's pure functions behind a small
interface, the batched functions a compiled (``jax.jit``) training loop steps them with, and the
VecEnv that runs those same functions for every other runner.

Three layers, one set of semantics:

- A backend wraps its library's env as a ``JaxEnv``: ``reset`` and ``step`` of ONE env, pure
  and jittable, with ``params`` a pytree passed at call time (so envs that differ only in their
  params share compilations).
- ``reset_envs`` and ``step_envs`` vmap them over a batch and give distrl's step semantics: an
  env whose episode ended resets on the same step, so ``obs`` is the next episode's first
  observation and ``final_obs`` the ended episode's last one. ``env_keys`` and ``split_keys``
  give every env its own key chain, so a compiled loop and the VecEnv draw the same episodes
  from the same seeds.
- ``JaxVecEnv`` runs those functions jitted on JAX's CPU device and hands their arrays over as
  CPU torch tensors through DLPack (no copy), as the Gymnasium and EnvPool backends do.

As in Gymnasium, an episode that terminates on its time-limit step is reported both terminated
and truncated (runners bootstrap only where ``truncated & ~terminated``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import torch

from distrl.envs.base import StepResult

if TYPE_CHECKING:
    import gymnasium as gym
    import jax


class JaxEnv(Protocol):
    """One JAX-native env. ``reset`` and ``step`` are pure and jittable (``self`` is static)."""

    name: str

    def reset(self, params: Any, key: jax.Array) -> tuple[jax.Array, Any]:
        """``(obs, state)`` of a new episode; ``obs`` float32 of the observation space's shape."""
        ...

    def step(
        self, params: Any, key: jax.Array, state: Any, action: jax.Array
    ) -> tuple[jax.Array, Any, jax.Array, jax.Array, jax.Array]:
        """``(obs, state, reward, terminated, truncated)`` after ``action``, without any reset:
        ``obs`` float32, ``reward`` float32, the two flags bool (``truncated``: the time limit
        in ``params`` was reached on this step)."""
        ...

    def spaces(self, params: Any) -> tuple[gym.spaces.Space, gym.spaces.Space]:
        """(observation space, action space) as Gymnasium spaces."""
        ...


def env_keys(seeds: Sequence[int]) -> jax.Array:
    """One typed PRNG key per env, env i's from ``seeds[i]``: ``jax.random.key(seed)`` as JAX
    seeds it with 64-bit integers enabled (the two 32-bit halves), whatever that setting is."""
    import jax

    seeds_u64 = np.array([int(s) % 2**64 for s in seeds], dtype=np.uint64)
    halves = np.stack((seeds_u64 >> np.uint64(32), seeds_u64 & np.uint64(2**32 - 1)), axis=1)
    return jax.random.wrap_key_data(halves.astype(np.uint32))


def split_keys(keys: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Advance every env's key chain: ``(keys to carry on, keys to use now)``, both ``[num_envs]``.
    The VecEnv draws the keys of each ``reset()`` and ``step()`` this way."""
    import jax

    pairs = jax.vmap(jax.random.split)(keys)
    return pairs[:, 0], pairs[:, 1]


def reset_envs(env: JaxEnv, params: Any, keys: jax.Array) -> tuple[jax.Array, Any]:
    """Start a new episode in every env. Pure and jittable.

    ``keys`` ``[num_envs]`` PRNG keys, one per env, used up by this call. Returns ``(obs,
    states)``: ``obs`` ``[num_envs, *obs_shape]`` float32 and ``states`` the env's state pytree
    with every leaf batched ``[num_envs, ...]``.
    """
    import jax

    return jax.vmap(functools.partial(env.reset, params))(keys)


def step_envs(
    env: JaxEnv, params: Any, keys: jax.Array, states: Any, actions: jax.Array
) -> tuple[jax.Array, Any, jax.Array, jax.Array, jax.Array, jax.Array]:
    """Step every env once, resetting those whose episode ended on the same step. Pure and jittable.

    ``keys`` ``[num_envs]`` PRNG keys used up by this call (each split into a step key and a
    reset key); ``states`` the batched state pytree from ``reset_envs`` or the previous step;
    ``actions`` ``[num_envs]`` ints (Discrete) or ``[num_envs, act_dim]`` floats (Box).

    Returns ``(obs, states, reward, terminated, truncated, final_obs)``: ``obs`` and ``final_obs``
    ``[num_envs, *obs_shape]`` float32, equal where no episode ended; where one ended, ``obs`` and
    ``states`` are the next episode's first and ``final_obs`` the ended episode's last
    observation. ``reward`` ``[num_envs]`` float32; ``terminated`` and ``truncated``
    ``[num_envs]`` bool (both may hold on the same step).
    """
    import jax
    import jax.numpy as jnp

    def step_one(key: jax.Array, state: Any, action: jax.Array) -> tuple[Any, ...]:
        step_key, reset_key = jax.random.split(key)
        final_obs, next_state, reward, terminated, truncated = env.step(params, step_key, state, action)
        done = jnp.logical_or(terminated, truncated)
        reset_obs, reset_state = env.reset(params, reset_key)
        # Keep the stepped state's dtypes, so a scan's carry keeps its type across resets.
        new_state = jax.tree.map(
            lambda fresh, stepped: jnp.where(done, fresh, stepped).astype(jnp.result_type(stepped)),
            reset_state,
            next_state,
        )
        obs = jnp.where(done, reset_obs, final_obs)
        return obs, new_state, reward, terminated, truncated, final_obs

    return jax.vmap(step_one)(keys, states, actions)


@dataclasses.dataclass(frozen=True)
class CompiledEnv:
    """A JAX env and its jitted key-chained reset and step."""

    env: JaxEnv
    reset: Callable
    step: Callable


def compile_env(env: JaxEnv) -> CompiledEnv:
    """Jit ``env``'s batched reset and step once; backends cache the result per env, so every
    VecEnv of it (training's, each evaluation's) shares the compilations."""
    import jax

    return CompiledEnv(
        env, jax.jit(functools.partial(_reset_chain, env)), jax.jit(functools.partial(_step_chain, env))
    )


class JaxVecEnv:
    """A batch of ``len(seeds)`` JAX envs stepped by jitted ``reset_envs``/``step_envs`` on
    JAX's CPU device, with torch tensors in and out.

    Env i has its own key chain from ``seeds[i]`` (``env_keys``), advanced by ``split_keys`` on
    every call, so the batch is reproducible, envs with equal seeds run equal episodes, and a
    compiled loop starting from ``env_keys(seeds)`` draws the same episodes. JAX's random streams
    are not Gymnasium's: the episodes are not those the Gymnasium backend draws. A second
    ``reset()`` continues each env's chain instead of replaying the first episodes.

    ``env``, ``env_params`` and ``compiled`` (the jitted key-chained reset and step) are for
    code that steps the envs itself.
    """

    device = torch.device("cpu")

    def __init__(self, compiled: CompiledEnv, env_params: Any, seeds: Sequence[int]) -> None:
        import jax

        self.num_envs = len(seeds)
        self.compiled = compiled
        self.env = compiled.env
        self.env_params = env_params
        # Pinned to the CPU: a GPU-enabled JAX would otherwise step there and copy back each step.
        self._cpu = jax.local_devices(backend="cpu")[0]
        self._keys = jax.device_put(env_keys(seeds), self._cpu)
        self._states: Any = None
        self.observation_space, self.action_space = self.env.spaces(env_params)

    def reset(self) -> torch.Tensor:
        self._keys, obs, self._states = self.compiled.reset(self.env_params, self._keys)
        return torch.from_dlpack(obs)

    def step(self, actions: torch.Tensor) -> StepResult:
        import jax

        jax_actions = jax.device_put(actions.numpy(force=True), self._cpu)
        self._keys, self._states, *outputs = self.compiled.step(
            self.env_params, self._keys, self._states, jax_actions
        )
        obs, reward, terminated, truncated, final_obs = (torch.from_dlpack(x) for x in outputs)
        return StepResult(obs, reward, terminated, truncated, final_obs)

    def close(self) -> None:
        self._states = None


def _reset_chain(env: JaxEnv, params: Any, keys: jax.Array) -> tuple[jax.Array, jax.Array, Any]:
    keys, reset_keys = split_keys(keys)
    obs, states = reset_envs(env, params, reset_keys)
    return keys, obs, states


def _step_chain(
    env: JaxEnv, params: Any, keys: jax.Array, states: Any, actions: jax.Array
) -> tuple[Any, ...]:
    keys, step_keys = split_keys(keys)
    obs, states, reward, terminated, truncated, final_obs = step_envs(env, params, step_keys, states, actions)
    return keys, states, obs, reward, terminated, truncated, final_obs
