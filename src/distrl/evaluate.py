"""Deterministic evaluation of a saved policy (mean action / arg-max, no exploration noise)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from distrl.config import RunConfig, config_from_dict
from distrl.envs import make_vec_env
from distrl.io import checkpoint as ckpt
from distrl.models.actor_critic import ActorCritic
from distrl.models.normalizer import RunningMeanStd

_MAX_PARALLEL_EPISODES = 16


@dataclass
class LoadedPolicy:
    cfg: RunConfig
    policy: ActorCritic
    obs_rms: RunningMeanStd | None
    checkpoint: Path
    global_step: int


def load_policy(path: Path) -> LoadedPolicy:
    """Rebuild the policy (and observation normaliser) stored in a checkpoint or run dir."""
    checkpoint = ckpt.resolve_checkpoint(path)
    files = ckpt.load_checkpoint(checkpoint)
    state = json.loads(files["state.json"])
    cfg = config_from_dict(state["config"], source=str(checkpoint / "state.json"))
    tensors = ckpt.tensors_from_bytes(files["model.safetensors"])
    probe = make_vec_env(cfg.env, [0])
    obs_dim, action_space = probe.observation_space.shape[0], probe.action_space
    probe.close()
    policy = ActorCritic(obs_dim, action_space, cfg.model)
    policy.load_state_dict(ckpt.strip_prefix(tensors, "policy."))
    obs_rms = None
    if "obs_rms.mean" in tensors:
        obs_rms = RunningMeanStd((obs_dim,))
        obs_rms.load_state_dict(ckpt.strip_prefix(tensors, "obs_rms."))
    return LoadedPolicy(cfg, policy.eval(), obs_rms, checkpoint, state["global_step"])


def evaluate(
    cfg: RunConfig,
    policy: ActorCritic,
    obs_rms: RunningMeanStd | None,
    episodes: int,
    seed: int,
) -> list[float]:
    """Return the undiscounted return of ``episodes`` episodes, episode i seeded ``seed + i``."""
    returns: list[float] = []
    for first in range(0, episodes, _MAX_PARALLEL_EPISODES):
        seeds = list(range(seed + first, seed + min(first + _MAX_PARALLEL_EPISODES, episodes)))
        returns += _run_episodes(cfg, policy, obs_rms, seeds)
    return returns


def _run_episodes(
    cfg: RunConfig, policy: ActorCritic, obs_rms: RunningMeanStd | None, seeds: list[int]
) -> list[float]:
    """Run one episode per env; envs that finish keep stepping but are no longer counted."""
    env = make_vec_env(cfg.env, seeds)
    obs = env.reset()
    totals = np.zeros(len(seeds))
    running = np.ones(len(seeds), dtype=bool)
    device = next(policy.parameters()).device
    while running.any():
        obs_t = torch.as_tensor(obs, dtype=torch.float32, device=device)
        if obs_rms is not None:
            obs_t = obs_rms.normalize(obs_t, cfg.normalize.clip)
        actions = policy.act_deterministic(obs_t).cpu().numpy()
        if policy.continuous:
            actions = np.clip(actions, env.action_space.low, env.action_space.high)
        result = env.step(actions)
        totals += result.reward * running
        running &= ~np.logical_or(result.terminated, result.truncated)
        obs = result.obs
    env.close()
    return totals.tolist()
