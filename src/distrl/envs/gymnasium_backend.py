"""``env.backend: gymnasium``: Gymnasium's SyncVectorEnv (in-process; on few cores it beats
subprocess vector envs), for a registered id or a user's ``gymnasium.Env`` class.

``env.backend: gymnasium_async``: the same envs, each stepped in a process of its own
(Gymnasium's AsyncVectorEnv, observations through shared memory), while the process that holds
the policy acts for all of them in one batched forward pass: Sample Factory's split of rollout
workers and a policy worker, for envs whose steps cost more than the round trip. The same seeds
give the same steps as ``gymnasium``."""

from __future__ import annotations

import contextlib
import importlib
import sys
import warnings
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AsyncVectorEnv, AutoresetMode, SyncVectorEnv, VectorEnv

from distrl.env_packages import import_env_packages
from distrl.envs.base import StepResult, host_tensor, obs_array_dtype
from distrl.envs.dict_obs import PackedDict, packed
from distrl.envs.observation_check import checked_env, misfit, misfit_error
from distrl.envs.user_class import import_env_class, is_class_spec
from distrl.errors import UserError

if TYPE_CHECKING:
    from distrl.config.sections import EnvConfig


def env_factory(cfg: EnvConfig) -> Callable[[], gym.Env]:
    """Return a constructor for one env: a registered Gymnasium id or ``module:Class``."""
    if is_class_spec(cfg.id):
        env_cls = import_env_class(cfg.id)
        show_mujoco_warnings_once()

        def make_custom() -> gym.Env:
            env = env_cls(**cfg.kwargs)
            if cfg.max_episode_steps is not None:
                env = gym.wrappers.TimeLimit(env, cfg.max_episode_steps)
            return env

        return make_custom
    try:
        entry_point = gym.spec(cfg.id).entry_point
    except gym.error.Error as exc:
        # Third-party ids (ALE/..., MiniGrid-...) exist once their package is imported.
        hint = (
            ""
            if cfg.imports
            else "; if a package registers it, name it in env.imports, e.g. env.imports=[ale_py]"
        )
        raise UserError(f"env.id {cfg.id!r}: {exc}{hint}", code="env-id-unknown") from None
    if isinstance(entry_point, str):  # its module imports the simulator, if it has one
        importlib.import_module(entry_point.partition(":")[0])
    show_mujoco_warnings_once()

    def make_registered() -> gym.Env:
        # An env process (gymnasium_async) starts fresh: the packages registering the id first.
        import_env_packages(cfg.imports)
        return gym.make(cfg.id, max_episode_steps=cfg.max_episode_steps, **cfg.kwargs)

    return make_registered


_mujoco_warnings_shown: set[str] = set()


def _print_mujoco_warning_once(message: str) -> None:
    if message not in _mujoco_warnings_shown:
        _mujoco_warnings_shown.add(message)
        print(f"MuJoCo warning (shown once): {message}", file=sys.stderr)


def show_mujoco_warnings_once() -> None:
    """MuJoCo warns each time it compiles a model (``settotalmass is deprecated`` for
    HalfCheetah), i.e. for every env built, burying the progress line: each message once."""
    mujoco = sys.modules.get("mujoco")
    if mujoco is not None:
        mujoco.set_mju_user_warning(_print_mujoco_warning_once)


def make_gymnasium_vec_env(cfg: EnvConfig, seeds: Sequence[int], device: torch.device) -> GymnasiumVecEnv:
    """Gymnasium steps on the host: ``device`` is ignored, the runner moves what it needs."""
    return _vec_env(cfg, seeds, in_processes=False)


def make_gymnasium_async_vec_env(
    cfg: EnvConfig, seeds: Sequence[int], device: torch.device
) -> GymnasiumVecEnv:
    """``make_gymnasium_vec_env`` with each env stepped in a process of its own."""
    return _vec_env(cfg, seeds, in_processes=True)


def _vec_env(cfg: EnvConfig, seeds: Sequence[int], in_processes: bool) -> GymnasiumVecEnv:
    make_env = env_factory(cfg)
    try:
        return GymnasiumVecEnv(make_env, seeds, cfg.id, cfg.obs_keys, in_processes)
    except (TypeError, gym.error.Error) as exc:
        raise UserError(f"env {cfg.id!r} could not be created: {exc}", code="env-create-failed") from None


class GymnasiumVecEnv:
    """SyncVectorEnv (or AsyncVectorEnv: ``in_processes``) with same-step auto-reset, seeded once
    with one distinct seed per env."""

    device = torch.device("cpu")

    def __init__(
        self,
        make_env: Callable[[], gym.Env],
        seeds: Sequence[int],
        env_id: str = "",
        obs_keys: Sequence[str] = (),
        in_processes: bool = False,
    ) -> None:
        """``obs_keys``: for Dict observations, the keys packed into the one tensor handed over;
        ``in_processes``: each env in a process of its own (started with ``spawn``: the caller
        may hold threads, which ``fork`` would copy mid-lock)."""
        self._env: VectorEnv
        self._seeds = [int(s) for s in seeds]
        self.num_envs = len(self._seeds)
        self.env_id = env_id
        self.steps = 0
        """Steps since the envs were built (an observation that breaks its space is said at its step)."""
        if in_processes:
            checked = [partial(checked_env, make_env, env_id, i, self.num_envs) for i in range(self.num_envs)]
            self._env = AsyncVectorEnv(checked, autoreset_mode=AutoresetMode.SAME_STEP, context="spawn")
        else:
            self._env = SyncVectorEnv([make_env for _ in seeds], autoreset_mode=AutoresetMode.SAME_STEP)
        self.observation_space = self._env.single_observation_space
        self._declared_space = self.observation_space
        self._packed: PackedDict | None = None
        if isinstance(self.observation_space, gym.spaces.Dict):
            self._packed = packed(self.observation_space, obs_keys, env_id)
            self.observation_space = self._packed
        elif obs_keys:
            raise UserError(
                f"env.obs_keys: env {env_id!r}'s observations are {self.observation_space}, not a Dict; "
                "env.obs_keys picks keys of Dict observations only: unset it",
                code="env-obs-keys-not-dict",
            )
        self.action_space = self._env.single_action_space
        self._obs_dtype = obs_array_dtype(self.observation_space)

    def _tensor(self, obs: Any, batched: bool = True) -> torch.Tensor:
        if self._packed is not None:
            obs = self._packed.pack(obs, batched)
        return host_tensor(obs, self._obs_dtype)

    def reset(self) -> torch.Tensor:
        with self._observations_checked():
            obs, _ = self._env.reset(seed=self._seeds)
        return self._tensor(obs)

    def step(self, actions: torch.Tensor) -> StepResult:
        self.steps += 1
        with self._observations_checked():
            obs, reward, terminated, truncated, info = self._env.step(actions.numpy(force=True))
        obs_tensor = self._tensor(obs)
        final_obs = obs_tensor  # where no episode ended, the step led to obs itself
        if "_final_obs" in info:
            final_obs = obs_tensor.clone()
            for i in np.flatnonzero(info["_final_obs"]):
                final_obs[i] = self._tensor(info["final_obs"][i], batched=False)
        return StepResult(
            obs_tensor,
            host_tensor(reward, np.float32),
            host_tensor(terminated, np.bool_),
            host_tensor(truncated, np.bool_),
            final_obs,
        )

    @contextlib.contextmanager
    def _observations_checked(self) -> Iterator[None]:
        """An observation that breaks its space is one line (``UserError``). In one process the
        batching's failure is explained from each env's observation, at no cost per step; envs in
        processes of their own check theirs (``ObservationCheck``), whose one line gymnasium
        raises here after warning with the env process's traceback, which is dropped."""
        if isinstance(self._env, AsyncVectorEnv):
            with warnings.catch_warnings(record=True) as said:
                try:
                    yield
                except UserError:
                    raise
                except Exception:
                    for warning in said:  # the traceback of an error of the user's own env stays
                        warnings.warn_explicit(
                            warning.message, warning.category, warning.filename, warning.lineno
                        )
                    raise
            return
        try:
            yield
        except (ValueError, TypeError, KeyError) as exc:
            if _in_batching(exc):  # not an error of the user's env itself, which keeps its traceback
                for index, obs in enumerate(getattr(self._env, "_env_obs", [])):
                    if (wrong := misfit(self._declared_space, obs)) is not None:
                        raise misfit_error(self.env_id, index, self.num_envs, self.steps, wrong) from None
            raise

    def close(self) -> None:
        self._env.close()


def _in_batching(exc: Exception) -> bool:
    """``exc`` came from gymnasium joining the envs' observations into one batch."""
    frame = exc.__traceback__
    while frame is not None:
        code = frame.tb_frame.f_code
        if "concatenate" in code.co_name and "gymnasium" in code.co_filename:
            return True
        frame = frame.tb_next
    return False
