"""Observations from a user's env that break the env's declared observation space: a wrong shape,
a dtype that does not cast to the space's, a Dict missing a key. Gymnasium's batching fails on
them deep inside numpy; ``misfit`` says what is wrong instead, and the host backend turns it into
one line naming the env, its index and the step (``UserError``). (Non-finite observations are a
separate matter: the update that saw one is skipped, ``train.max_bad_updates``.)"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import gymnasium as gym
import numpy as np

from distrl.errors import UserError


def misfit(space: gym.spaces.Space, obs: Any) -> str | None:
    """What keeps ``obs`` from being an observation of ``space``; None when it fits (values out of
    the space's bounds fit: only shape, dtype and keys are checked)."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, Mapping):
            return f"a {type(obs).__name__}, not the dict its space declares"
        missing = [key for key in space.spaces if key not in obs]
        if missing:
            return f"a dict missing the key(s) {', '.join(map(repr, missing))} its space declares"
        for key, subspace in space.spaces.items():
            if (wrong := misfit(subspace, obs[key])) is not None:
                return f"key {key!r}: {wrong}"
        return None
    if isinstance(space, gym.spaces.Box):
        array = np.asarray(obs)
        if array.shape != space.shape:
            return f"shape {array.shape}, not the {space.shape} of its space"
        if not np.can_cast(array.dtype, space.dtype, "same_kind"):
            return f"dtype {array.dtype}, which does not cast to its space's {space.dtype}"
    return None


def misfit_error(env_id: str, index: int, num_envs: int, step: int, wrong: str) -> UserError:
    """The one line for env ``index``'s observation at ``step`` (steps since the envs were built)."""
    return UserError(
        f"env {env_id!r} (env {index} of {num_envs} here) at step {step}: its observation is {wrong}; "
        "an env must return observations its observation_space declares",
        code="env-observation-misfit",
    )


class ObservationCheck(gym.Wrapper):
    """Checks each observation of one env in a process of its own (``gymnasium_async``), where
    the batch that fails is out of the learner's reach: the env's process raises the one line."""

    def __init__(self, env: gym.Env, env_id: str, index: int, num_envs: int) -> None:
        super().__init__(env)
        self.env_id, self.index, self.num_envs = env_id, index, num_envs
        self.steps = 0

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, info = self.env.reset(**kwargs)
        self._check(obs)
        return obs, info

    def step(self, action: Any) -> tuple[Any, Any, Any, Any, dict[str, Any]]:
        self.steps += 1
        result = self.env.step(action)
        self._check(result[0])
        return result

    def _check(self, obs: Any) -> None:
        if (wrong := misfit(self.observation_space, obs)) is not None:
            raise misfit_error(self.env_id, self.index, self.num_envs, self.steps, wrong)


def checked_env(make_env: Callable[[], gym.Env], env_id: str, index: int, num_envs: int) -> gym.Env:
    """``make_env()`` wrapped in ``ObservationCheck`` (a top-level function: env processes get it
    pickled)."""
    return ObservationCheck(make_env(), env_id, index, num_envs)
