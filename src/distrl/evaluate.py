"""Deterministic evaluation of a policy (mean action / arg-max, no exploration noise)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from distrl.config import RunConfig, config_from_dict
from distrl.envs import make_vec_env
from distrl.io import checkpoint as ckpt
from distrl.io.train_state import SavedState, read_state

_MAX_PARALLEL_EPISODES = 16


@dataclass
class LoadedPolicy:
    cfg: RunConfig
    policy: nn.Module
    """Raw observations in, env actions out (``Runner.deployable_policy``)."""
    algorithm: str
    obs_dim: int
    checkpoint: Path
    global_step: int


def load_policy(path: Path) -> LoadedPolicy:
    """Rebuild the deterministic policy stored in a checkpoint or run dir; no env is built."""
    checkpoint = ckpt.resolve_checkpoint(path)
    saved = read_state(ckpt.load_checkpoint(checkpoint), str(checkpoint))
    cfg, policy = policy_from_saved(saved, str(checkpoint / "state.json"))
    obs_dim = saved.observation_space.shape[0]
    return LoadedPolicy(cfg, policy, saved.meta["algorithm"], obs_dim, checkpoint, saved.meta["global_step"])


def policy_from_saved(saved: SavedState, where: str) -> tuple[RunConfig, nn.Module]:
    """The config and deterministic policy of a checkpoint read back (or a ``snapshot``)."""
    from distrl.runners import runner_class

    cfg = config_from_dict(saved.meta["config"], source=where)
    return cfg, runner_class(saved.meta["algorithm"]).policy_from_checkpoint(cfg, saved).eval()


def evaluate(cfg: RunConfig, policy: nn.Module, episodes: int, seed: int) -> list[float]:
    """Return the undiscounted return of ``episodes`` episodes, episode i seeded ``seed + i``."""
    returns: list[float] = []
    for first in range(0, episodes, _MAX_PARALLEL_EPISODES):
        seeds = list(range(seed + first, seed + min(first + _MAX_PARALLEL_EPISODES, episodes)))
        returns += _run_episodes(cfg, policy, seeds)
    return returns


@torch.no_grad()
def _run_episodes(cfg: RunConfig, policy: nn.Module, seeds: list[int]) -> list[float]:
    """Run one episode per env; envs that finish keep stepping but are no longer counted."""
    device = next(policy.parameters()).device
    env = make_vec_env(cfg.env, seeds, device)
    obs = env.reset()
    totals = torch.zeros(len(seeds), dtype=torch.float64, device=device)
    running = torch.ones(len(seeds), dtype=torch.bool, device=device)
    while running.any():
        result = env.step(policy(obs.to(device)).to(env.device))
        reward, terminated, truncated = (x.to(device) for x in result[1:4])
        totals += reward * running
        running &= ~(terminated | truncated)
        obs = result.obs
    env.close()
    return totals.tolist()
