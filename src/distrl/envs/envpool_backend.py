"""``env.backend: envpool``: EnvPool's C++ vectorised envs behind distrl's VecEnv interface.

EnvPool steps the whole batch in C++ threads and hands back fresh numpy arrays, which become CPU
tensors without a copy. Two differences from EnvPool's own Gymnasium API are bridged or documented:

- Auto-reset. EnvPool resets an ended env on the *following* step: that step ignores the env's
  action and returns the new episode's first observation. distrl needs the reset on the same step
  (``obs`` already the next episode's first observation, ``final_obs`` the last one of the ended
  episode), and EnvPool 1.2.5 has no option for that (its Gymnasium metadata says ``NEXT_STEP``).
  So after a step in which envs ended, ``reset(env_id=ended)`` resets exactly those envs at once.
  It draws the same initial state the deferred auto-reset would have drawn, clears the pending
  auto-reset, and restarts the env's step count, so every step distrl sends really applies its
  actions and episodes keep their length (CartPole-v1 truncates at exactly 500 steps).
- Termination on the time-limit step. EnvPool reports ``terminated = done & ~truncated``, and its
  ``discount`` is 0 for truncations too, so an episode that terminates on exactly its last allowed
  step comes back as truncated only (Gymnasium reports both). That is one step in a whole episode,
  bootstrapped from a terminal state's value; it cannot be recovered from EnvPool's outputs.

EnvPool's classic-control envs compute in float64 like Gymnasium's and round only the outputs to
float32; CartPole-v1 and Acrobot-v1 follow Gymnasium's dynamics. Its Pendulum-v1 does not quite:
EnvPool 1.2.5 advances the angle by the velocity *before* clipping it to 8 rad/s, Gymnasium after,
so the two differ on steps where the pendulum spins at full speed.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from distrl.envs.base import StepResult, host_tensor, obs_array_dtype
from distrl.errors import UserError

if TYPE_CHECKING:
    from distrl.config.sections import EnvConfig

RESERVED_KWARGS = frozenset(
    {"num_envs", "batch_size", "seed", "env_seed", "max_episode_steps", "gym_reset_return_info"}
)
"""EnvPool options this backend sets itself (from the number of seeds, the seeds and the env config)."""


def make_envpool_vec_env(cfg: EnvConfig, seeds: Sequence[int], device: torch.device) -> EnvPoolVecEnv:
    """EnvPool steps on the host: ``device`` is ignored, the runner moves what it needs."""
    return EnvPoolVecEnv(cfg.id, seeds, cfg.max_episode_steps, **cfg.kwargs)


class EnvPoolVecEnv:
    """One synchronous EnvPool batch of ``len(seeds)`` envs with same-step auto-reset, on the CPU.

    Env i is seeded ``seeds[i]`` (EnvPool takes one seed per env), so the batch is reproducible and
    ranks differ; EnvPool's random streams are not Gymnasium's, so the episodes are not those the
    Gymnasium backend draws from the same seeds. Seeds are fixed when the batch is built: a second
    ``reset()`` continues each env's stream instead of replaying the first episodes.

    ``kwargs`` are EnvPool options of the task, e.g. ``num_threads``: 1 by default, as ranks already
    take a core each (EnvPool's own default starts up to one thread per core of the machine, which
    oversubscribes a node shared by several ranks).
    """

    def __init__(
        self, env_id: str, seeds: Sequence[int], max_episode_steps: int | None, **kwargs: Any
    ) -> None:
        import envpool

        if env_id not in envpool.list_all_envs():
            raise UserError(
                f"env.id {env_id!r} is not an EnvPool env (env.backend=envpool); "
                "envpool.list_all_envs() lists the ids it implements",
                code="env-id-unknown",
            )
        _check_kwargs(envpool, env_id, kwargs)
        if max_episode_steps is not None:
            kwargs["max_episode_steps"] = max_episode_steps
        # One stepping thread per rank unless asked: ranks already take a core each.
        kwargs.setdefault("num_threads", 1)
        try:
            self._env = envpool.make_gymnasium(
                env_id, num_envs=len(seeds), seed=[int(s) for s in seeds], **kwargs
            )
        except (AssertionError, TypeError, ValueError) as exc:
            raise UserError(
                f"env {env_id!r} (envpool backend) could not be created: {exc}", code="env-create-failed"
            ) from None
        self.num_envs = len(seeds)
        self.device = torch.device("cpu")
        # EnvPool builds its Boxes from float64 bounds with dtype float32, and Gymnasium warns
        # about the cast on every build; the bounds are float32 values, so nothing is lost.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*precision lowered by casting to float32")
            self.observation_space = self._env.observation_space
            self.action_space = self._env.action_space
        self._obs_dtype = obs_array_dtype(self.observation_space)

    def reset(self) -> torch.Tensor:
        obs, _ = self._env.reset()
        return host_tensor(obs, self._obs_dtype)

    def step(self, actions: torch.Tensor) -> StepResult:
        obs, reward, terminated, truncated, _ = self._env.step(actions.numpy())
        final_obs = obs
        ended = np.flatnonzero(terminated | truncated)
        if ended.size:
            first_obs, info = self._env.reset(ended)
            obs = obs.copy()
            obs[info["env_id"]] = first_obs
        return StepResult(
            obs=host_tensor(obs, self._obs_dtype),
            reward=host_tensor(reward, np.float32),
            terminated=host_tensor(terminated, np.bool_),
            truncated=host_tensor(truncated, np.bool_),
            final_obs=host_tensor(final_obs, self._obs_dtype),
        )

    def close(self) -> None:
        self._env.close()


def _check_kwargs(envpool: ModuleType, env_id: str, kwargs: dict[str, Any]) -> None:
    options = set(envpool.make_spec(env_id).config._fields) - RESERVED_KWARGS
    unknown = sorted(set(kwargs) - options)
    if unknown:
        raise UserError(
            f"env.kwargs {', '.join(unknown)}: not EnvPool options of {env_id!r} that this backend "
            f"passes on (allowed: {', '.join(sorted(options))}; the number of envs, seeds and time "
            "limit come from env.num_envs, train.seed and env.max_episode_steps)",
            code="env-kwargs-unknown",
        )
