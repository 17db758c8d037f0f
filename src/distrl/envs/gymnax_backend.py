"""``env.backend: gymnax``: gymnax's JAX envs behind distrl's VecEnv interface, and the pure
functions a compiled (``jax.jit``) training loop steps them with.

Two layers, one set of semantics:

- ``reset_envs`` and ``step_envs`` are pure and jittable, vmapped over a batch of envs. A compiled
  loop scans over ``step_envs``; ``env_keys`` and ``split_keys`` give it the same key chains the
  VecEnv uses, so both draw the same episodes from the same seeds.
- ``GymnaxVecEnv`` runs those functions jitted on JAX's CPU device and hands their arrays over as
  CPU torch tensors through DLPack (no copy), as the Gymnasium and EnvPool backends do.

Step semantics are distrl's, not gymnax's ``env.step``: the step calls ``env.step_env`` (no
auto-reset) and resets where the episode ended on the same step, so ``obs`` is the next episode's
first observation and ``final_obs`` the ended episode's last one. gymnax 1.0.1 reports natural
terminations from ``step_env`` and time limits separately, through ``env.is_truncated(state)``:
the stepped state's time counter has reached ``env_params.max_steps_in_episode``. Like
Gymnasium, an episode that terminates on its time-limit step is reported both terminated and
truncated (runners bootstrap only where ``truncated & ~terminated``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from distrl.config import EnvConfig
from distrl.envs.base import StepResult
from distrl.errors import UserError

if TYPE_CHECKING:
    import gymnasium as gym
    import jax

TIME_LIMIT_PARAM = "max_steps_in_episode"
"""The gymnax env parameter ``env.max_episode_steps`` sets."""


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


def reset_envs(env: Any, env_params: Any, keys: jax.Array) -> tuple[jax.Array, Any]:
    """Start a new episode in every env. Pure and jittable.

    ``env`` is a gymnax ``Environment`` (a Python object: close over it or mark it static under
    ``jax.jit``), ``env_params`` its params (a pytree), ``keys`` ``[num_envs]`` PRNG keys, one per
    env, used up by this call. Returns ``(obs, states)``: ``obs`` ``[num_envs, *obs_shape]``
    float32 and ``states`` the env's state pytree with every leaf batched ``[num_envs, ...]``.
    """
    import jax
    import jax.numpy as jnp

    def reset_one(key: jax.Array) -> tuple[jax.Array, Any]:
        obs, state = env.reset_env(key, env_params)
        return jnp.asarray(obs, jnp.float32), state

    return jax.vmap(reset_one)(keys)


def step_envs(
    env: Any, env_params: Any, keys: jax.Array, states: Any, actions: jax.Array
) -> tuple[jax.Array, Any, jax.Array, jax.Array, jax.Array, jax.Array]:
    """Step every env once, resetting those whose episode ended on the same step. Pure and jittable.

    ``env``, ``env_params`` as for ``reset_envs``; ``keys`` ``[num_envs]`` PRNG keys used up by
    this call (each split into a step key and a reset key); ``states`` the batched state pytree
    from ``reset_envs`` or the previous step; ``actions`` ``[num_envs]`` ints (Discrete) or
    ``[num_envs, act_dim]`` floats (Box).

    Returns ``(obs, states, reward, terminated, truncated, final_obs)``: ``obs`` and ``final_obs``
    ``[num_envs, *obs_shape]`` float32, equal where no episode ended; where one ended, ``obs`` and
    ``states`` are the next episode's first and ``final_obs`` the ended episode's last
    observation. ``reward`` ``[num_envs]`` float32; ``terminated`` ``[num_envs]`` bool, the
    episode reached a terminal state; ``truncated`` ``[num_envs]`` bool, the stepped state's time
    counter reached ``env_params.max_steps_in_episode`` (may coincide with ``terminated``).
    """
    import jax
    import jax.numpy as jnp

    def step_one(key: jax.Array, state: Any, action: jax.Array) -> tuple[Any, ...]:
        step_key, reset_key = jax.random.split(key)
        final_obs, next_state, reward, terminated, _ = env.step_env(step_key, state, action, env_params)
        truncated = jnp.asarray(env.is_truncated(next_state, env_params), jnp.bool_)
        done = jnp.logical_or(terminated, truncated)
        reset_obs, reset_state = env.reset_env(reset_key, env_params)
        # Keep the stepped state's dtypes, so a scan's carry keeps its type across resets.
        new_state = jax.tree.map(
            lambda fresh, stepped: jnp.where(done, fresh, stepped).astype(jnp.result_type(stepped)),
            reset_state,
            next_state,
        )
        final_obs = jnp.asarray(final_obs, jnp.float32)
        obs = jnp.where(done, jnp.asarray(reset_obs, jnp.float32), final_obs)
        reward = jnp.asarray(reward, jnp.float32)
        return obs, new_state, reward, jnp.asarray(terminated, jnp.bool_), truncated, final_obs

    return jax.vmap(step_one)(keys, states, actions)


def make_gymnax_vec_env(
    cfg: EnvConfig, seeds: Sequence[int], device: torch.device | None = None
) -> GymnaxVecEnv:
    """gymnax steps on JAX's CPU device here: ``device`` is ignored, the runner moves what it needs.

    ``cfg.kwargs`` naming fields of the env's params (e.g. CartPole-v1's ``gravity``) replace
    them; the rest go to the env's constructor through ``gymnax.make``.
    """
    gymnax = _import_gymnax()
    if cfg.id not in gymnax.registered_envs:
        raise UserError(
            f"env.id {cfg.id!r} is not a gymnax env (env.backend=gymnax); gymnax has: "
            f"{', '.join(gymnax.registered_envs)}"
        )
    if TIME_LIMIT_PARAM in cfg.kwargs:
        raise UserError(f"env.kwargs {TIME_LIMIT_PARAM}: set the time limit with env.max_episode_steps")
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
            f"(env.kwargs may also set these params: {settable})"
        ) from None
    return GymnaxVecEnv(compiled, default_params.replace(**param_kwargs), seeds)


@dataclasses.dataclass(frozen=True)
class CompiledEnv:
    """A gymnax env and its jitted key-chained reset and step."""

    env: Any
    reset: Callable
    step: Callable


@functools.cache
def _compiled_env(env_id: str, constructor_json: str) -> CompiledEnv:
    """One per id and constructor arguments in a process: every VecEnv of it (training's, each
    evaluation's) shares the compilations instead of paying ~1 s for its own."""
    import jax

    env = _import_gymnax().make(env_id, **json.loads(constructor_json))[0]
    return CompiledEnv(
        env, jax.jit(functools.partial(_reset_chain, env)), jax.jit(functools.partial(_step_chain, env))
    )


class GymnaxVecEnv:
    """A batch of ``len(seeds)`` gymnax envs stepped by jitted ``reset_envs``/``step_envs`` on
    JAX's CPU device, with torch tensors in and out.

    Env i has its own key chain from ``seeds[i]`` (``env_keys``), advanced by ``split_keys`` on
    every call, so the batch is reproducible, envs with equal seeds run equal episodes, and a
    compiled loop starting from ``env_keys(seeds)`` draws the same episodes. gymnax's random
    streams are not Gymnasium's: the episodes are not those the Gymnasium backend draws. A second
    ``reset()`` continues each env's chain instead of replaying the first episodes.

    ``env`` and ``env_params`` are the gymnax env and its params, for code that calls
    ``reset_envs``/``step_envs`` itself.
    """

    device = torch.device("cpu")

    def __init__(self, compiled: CompiledEnv, env_params: Any, seeds: Sequence[int]) -> None:
        import jax
        from gymnax.environments.spaces import gymnax_space_to_gym_space

        self.num_envs = len(seeds)
        self.env = env = compiled.env
        self.env_params = env_params
        # Pinned to the CPU: a GPU-enabled JAX would otherwise step there and copy back each step.
        self._cpu = jax.local_devices(backend="cpu")[0]
        self._keys = jax.device_put(env_keys(seeds), self._cpu)
        self._states: Any = None
        self._reset, self._step = compiled.reset, compiled.step
        try:
            self.observation_space: gym.spaces.Space = gymnax_space_to_gym_space(
                env.observation_space(env_params)
            )
            self.action_space: gym.spaces.Space = gymnax_space_to_gym_space(env.action_space(env_params))
        except NotImplementedError as exc:
            raise UserError(f"env {env.name!r} (gymnax backend): {exc}") from None

    def reset(self) -> torch.Tensor:
        self._keys, obs, self._states = self._reset(self.env_params, self._keys)
        return torch.from_dlpack(obs)

    def step(self, actions: torch.Tensor) -> StepResult:
        import jax

        jax_actions = jax.device_put(actions.numpy(force=True), self._cpu)
        self._keys, self._states, *outputs = self._step(
            self.env_params, self._keys, self._states, jax_actions
        )
        obs, reward, terminated, truncated, final_obs = (torch.from_dlpack(x) for x in outputs)
        return StepResult(obs, reward, terminated, truncated, final_obs)

    def close(self) -> None:
        self._states = None


def _reset_chain(env: Any, env_params: Any, keys: jax.Array) -> tuple[jax.Array, jax.Array, Any]:
    keys, reset_keys = split_keys(keys)
    obs, states = reset_envs(env, env_params, reset_keys)
    return keys, obs, states


def _step_chain(
    env: Any, env_params: Any, keys: jax.Array, states: Any, actions: jax.Array
) -> tuple[Any, ...]:
    keys, step_keys = split_keys(keys)
    obs, states, reward, terminated, truncated, final_obs = step_envs(
        env, env_params, step_keys, states, actions
    )
    return keys, states, obs, reward, terminated, truncated, final_obs


def _import_gymnax() -> ModuleType:
    try:
        import gymnax
    except ImportError:
        raise UserError("env.backend=gymnax needs gymnax and jax: pip install 'distrl[jax]'") from None
    return gymnax
