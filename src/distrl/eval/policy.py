"""A checkpoint's deployable policy, rebuilt without an env through the algorithm registry
(``distrl.algos.registry``): what ``distrl eval``, ``distrl export``, eval workers and logging
policies act with."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
from torch import nn

from distrl.algos.registry import algorithm, load
from distrl.config.run import RunConfig, config_from_dict
from distrl.io import checkpoint as ckpt
from distrl.io.train_state import SavedState, read_state


@dataclass
class LoadedPolicy:
    cfg: RunConfig
    policy: nn.Module
    """Raw observations in, env actions out (``Runner.deployable_policy``)."""
    algorithm: str
    observation_space: gym.spaces.Box
    checkpoint: Path
    global_step: int
    chosen: str
    """Which of a run's checkpoints it is: "newest", "best" (``checkpoint.keep_best``), or
    "given" (a checkpoint dir named)."""


def load_policy(path: Path, best: bool = False) -> LoadedPolicy:
    """Rebuild the deterministic policy stored in a checkpoint or run dir (its newest checkpoint,
    or with ``best`` the one that scored best at the run's own checks); no env is built."""
    checkpoint = ckpt.resolve_checkpoint(path, best=best)
    chosen = "given" if checkpoint == path else "best" if best else "newest"
    saved = read_state(ckpt.load_checkpoint(checkpoint), checkpoint)
    cfg, policy = policy_from_saved(saved, str(checkpoint / "state.json"))
    return LoadedPolicy(
        cfg,
        policy,
        saved.meta["algorithm"],
        saved.observation_space,
        checkpoint,
        saved.meta["global_step"],
        chosen,
    )


def policy_from_saved(saved: SavedState, where: str) -> tuple[RunConfig, nn.Module]:
    """The config and deterministic policy of a checkpoint read back (or a ``snapshot``)."""
    cfg = config_from_dict(saved.meta["config"], source=where)
    build = load(algorithm(cfg.algo.name).deployable_policy)
    return cfg, build(cfg, saved).eval()
