"""A user's batched torch env with rsl_rl's VecEnv interface (what Isaac Lab's RL wrappers expose)
behind distrl's VecEnv.

The user's class has ``num_envs``, ``num_actions``, ``get_observations()`` and ``step(actions) ->
(obs, rewards, dones, extras)`` with ``extras["time_outs"]`` marking episodes cut by a time limit.
Observations may be a tensor, a dict or TensorDict of groups (the ``"policy"`` group is the
policy's input, as in Isaac Lab), or rsl_rl 1.x/2.x's ``(obs, extras)`` pair.
"""

from __future__ import annotations

import inspect
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from distrl.envs.base import StepResult
from distrl.errors import UserError

POLICY_GROUP = "policy"


class RslRlStyleVecEnv:
    """The interface has no final observation of an ended episode (the env resets inside
    ``step``): ``final_obs`` of an ended episode is the observation its last action was chosen
    from, so a time-out bootstraps from V(s_t), as rsl_rl itself does. An ``extras["final_obs"]``
    tensor, where the env provides one, is used instead."""

    def __init__(self, env: Any, env_id: str) -> None:
        self._env = env
        self._env_id = env_id
        self.num_envs = int(env.num_envs)
        self.device = torch.device(getattr(env, "device", "cpu"))
        self._obs = self._policy_obs(env.get_observations())
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (self._obs.shape[1],), np.float32)
        self.action_space = self._action_space(env)

    def reset(self) -> torch.Tensor:
        """The current observations: such envs start their episodes when they are built."""
        return self._obs

    def step(self, actions: torch.Tensor) -> StepResult:
        obs, rewards, dones, extras = self._env.step(actions)
        obs = self._policy_obs(obs)
        dones = dones.reshape(self.num_envs).to(torch.bool)
        time_outs = extras.get("time_outs", torch.zeros_like(dones)).to(torch.bool) & dones
        final_obs = extras.get("final_obs")
        if final_obs is None:
            final_obs = torch.where(dones[:, None], self._obs, obs)
        self._obs = obs
        # Copies: such envs may refill the same buffers in place on the next step (Isaac Lab does).
        rewards = rewards.reshape(self.num_envs).to(torch.float32, copy=True)
        return StepResult(obs, rewards, dones & ~time_outs, time_outs, final_obs)

    def close(self) -> None:
        close = getattr(self._env, "close", None)
        if close is not None:
            close()

    def _policy_obs(self, obs: Any) -> torch.Tensor:
        if isinstance(obs, tuple):  # rsl_rl 1.x/2.x: (obs, extras)
            obs = obs[0]
        if not isinstance(obs, torch.Tensor):
            # TensorDict answers membership only through keys().
            if POLICY_GROUP not in obs.keys():  # noqa: SIM118
                raise UserError(
                    f"env.id {self._env_id!r}: observations have groups {sorted(obs.keys())}, "
                    f"but no {POLICY_GROUP!r} group to feed the policy",
                    code="env-rsl-policy-group-missing",
                )
            obs = obs[POLICY_GROUP]
        if obs.ndim != 2 or obs.shape[0] != self.num_envs:
            raise UserError(
                f"env.id {self._env_id!r}: observations have shape {tuple(obs.shape)}, "
                f"expected [num_envs={self.num_envs}, obs_dim]",
                code="env-rsl-observation-shape",
            )
        return obs.to(torch.float32, copy=True)

    def _action_space(self, env: Any) -> gym.spaces.Space:
        """The env's own ``action_space`` when it declares one (e.g. Discrete), else rsl_rl's
        unbounded continuous actions of size ``num_actions``."""
        space = getattr(env, "action_space", None)
        if isinstance(space, gym.spaces.Space):
            return space
        if not isinstance(getattr(env, "num_actions", None), int):
            raise UserError(
                f"env.id {self._env_id!r}: the env has neither num_actions nor an action_space; give its "
                "class one of them",
                code="env-rsl-action-space-missing",
            )
        return gym.spaces.Box(-np.inf, np.inf, (env.num_actions,), np.float32)


def build_rsl_rl_style_env(
    env_class: type, env_id: str, num_envs: int, device: torch.device, seed: int, kwargs: dict[str, Any]
) -> RslRlStyleVecEnv:
    """Construct ``env_class(num_envs=..., device=..., seed=..., **kwargs)``; ``seed`` is passed
    only to classes that accept it."""
    params = inspect.signature(env_class).parameters
    extra = {"seed": seed} if "seed" in params else {}
    env = env_class(num_envs=num_envs, device=device, **extra, **kwargs)
    return RslRlStyleVecEnv(env, env_id)
