"""``env.backend: ale``: Atari games through ale-py's own vectorised env (``AtariVectorEnv``,
C++ threads; the ROMs ship in ale-py's wheel, nothing downloads), behind distrl's VecEnv.

``env.id`` names a game as Gymnasium does (``ALE/Pong-v5``, ``ALE/BeamRider-v5``) or as ale-py
does (``pong``, ``beam_rider``). The preprocessing is CleanRL's Atari PPO's, stated here and
changeable through ``env.kwargs`` (ale-py's own option names): 4 frames skipped with a max over
the last two (``frameskip``, ``maxpool``), 84x84 greyscale (``img_height``, ``img_width``,
``grayscale``), 4 frames stacked (``stack_num``), up to 30 no-ops at reset (``noop_max``), FIRE
at reset (``use_fire_reset``), no sticky actions (``repeat_action_probability``), 108,000 frames
at most a game (``max_num_frames_per_episode``).

Two of CleanRL's wrappers are distrl's own, so the episode statistics stay whole games:
- Episodic life (``episodic_life``, on by default): a lost life ends the agent's episode for
  learning (``StepResult.life_lost``: no bootstrapping past it) while the game goes on and is
  counted as one episode. ale-py's own ``episodic_life`` restarts the whole game at every lost
  life under same-step auto-reset, so distrl reads lives instead. Unlike CleanRL's wrappers, no
  FIRE is pressed after a lost life: the agent relaunches the ball itself where a game needs it.
- Reward clipping: the env hands over the raw game score; ``normalize.clip_rewards`` trains on
  its sign. ``episode_return_mean`` is then the game score over whole games.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from distrl.envs.base import StepResult, host_tensor
from distrl.errors import UserError

if TYPE_CHECKING:
    from distrl.config.sections import EnvConfig

CLEANRL_PREPROCESSING = {
    "frameskip": 4, "maxpool": True, "img_height": 84, "img_width": 84, "grayscale": True,
    "stack_num": 4, "noop_max": 30, "use_fire_reset": True, "repeat_action_probability": 0.0,
    "max_num_frames_per_episode": 108_000,
}  # fmt: skip
"""ale-py options and their defaults here (CleanRL's ``ppo_atari.py`` wrappers)."""
OPTIONS = frozenset({*CLEANRL_PREPROCESSING, "full_action_space", "num_threads", "episodic_life"})


def make_ale_vec_env(cfg: EnvConfig, seeds: Sequence[int], device: torch.device) -> AleVecEnv:
    """ale-py steps on the host: ``device`` is ignored, the runner moves what it needs."""
    if cfg.max_episode_steps is not None:
        raise UserError(
            "env.max_episode_steps: Atari games end by ale-py's frame limit; set "
            "env.kwargs.max_num_frames_per_episode (frames, 4 a step) instead",
            code="env-ale-max-episode-steps",
        )
    return AleVecEnv(game_name(cfg.id), seeds, **cfg.kwargs)


def game_name(env_id: str) -> str:
    """ale-py's name of the game ``env_id`` names (``ALE/BeamRider-v5`` -> ``beam_rider``)."""
    from ale_py.roms import get_all_rom_ids

    name = env_id.removeprefix("ALE/")
    name = re.sub(r"-v\d+$", "", name)
    name = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name).lower()
    if name not in get_all_rom_ids():
        raise UserError(
            f"env.id {env_id!r}: no Atari game {name!r} in ale-py (env.backend=ale; "
            "ale_py.roms.get_all_rom_ids() lists them)",
            code="env-id-unknown",
        )
    return name


class AleVecEnv:
    """``len(seeds)`` games with same-step auto-reset, env i seeded ``seeds[i]``."""

    device = torch.device("cpu")

    def __init__(self, game: str, seeds: Sequence[int], **kwargs: Any) -> None:
        from ale_py.vector_env import AtariVectorEnv

        unknown = sorted(set(kwargs) - OPTIONS)
        if unknown:
            raise UserError(
                f"env.kwargs {', '.join(unknown)}: not options of the ale backend (allowed: "
                f"{', '.join(sorted(OPTIONS))}; reward clipping is normalize.clip_rewards)",
                code="env-kwargs-unknown",
            )
        options = {**CLEANRL_PREPROCESSING, "num_threads": 1, **kwargs}
        if not options["grayscale"]:
            raise UserError(
                "env.kwargs.grayscale=false: stacked colour frames are rank-4 observations, which "
                "distrl's encoders do not take yet; keep grayscale",
                code="env-ale-grayscale",
            )
        self.episodic_life = bool(options.pop("episodic_life", True))
        self._env = AtariVectorEnv(
            game, len(seeds), autoreset_mode="SameStep", episodic_life=False, reward_clipping=False, **options
        )
        self._seeds = np.asarray([int(s) % 2**31 for s in seeds], dtype=np.int64)
        self.num_envs = len(seeds)
        self.observation_space: gym.spaces.Box = self._env.single_observation_space
        self.action_space = self._env.single_action_space
        self._lives = np.zeros(self.num_envs, dtype=np.int64)

    def reset(self) -> torch.Tensor:
        obs, info = self._env.reset(seed=self._seeds)
        self._lives = info["lives"].astype(np.int64)
        return host_tensor(obs, np.uint8)

    def step(self, actions: torch.Tensor) -> StepResult:
        obs, reward, terminated, truncated, info = self._env.step(actions.numpy().astype(np.int64))
        ended = terminated | truncated
        final_obs = host_tensor(obs, np.uint8)
        if ended.any():
            final_obs = final_obs.clone()
            for i in np.flatnonzero(ended):
                final_obs[i] = host_tensor(info["final_obs"][i], np.uint8)
        lives = info["lives"].astype(np.int64)
        # A game that goes on with fewer lives (an ended game's count is the next game's).
        life_lost = (lives < self._lives) & ~ended
        self._lives = lives
        return StepResult(
            obs=host_tensor(obs, np.uint8),
            reward=host_tensor(reward, np.float32),
            terminated=host_tensor(terminated, np.bool_),
            truncated=host_tensor(truncated, np.bool_),
            final_obs=final_obs,
            life_lost=host_tensor(life_lost, np.bool_) if self.episodic_life else None,
        )

    def close(self) -> None:
        self._env.close()
