"""Deterministic evaluation: episodes played with a policy (mean action / arg-max, no
exploration noise), each on its own seed. A policy with memory (``state_size`` > 0) is called
with each env's state, which starts at zeros."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from distrl.envs import make_vec_env
from distrl.errors import UserError
from distrl.models.memory import policy_state_size, reset_ended
from distrl.models.parametric_q_network import ParametricGreedyPolicy

if TYPE_CHECKING:
    from distrl.config.run import RunConfig

_MAX_PARALLEL_EPISODES = 16


def evaluate(cfg: RunConfig, policy: nn.Module, episodes: int, seed: int) -> list[float]:
    """Return the undiscounted return of ``episodes`` episodes, episode i seeded ``seed + i``."""
    returns: list[float] = []
    for first in range(0, episodes, _MAX_PARALLEL_EPISODES):
        seeds = list(range(seed + first, seed + min(first + _MAX_PARALLEL_EPISODES, episodes)))
        returns += _run_episodes(cfg, policy, seeds)
    return returns


def evaluate_q_policy(cfg: RunConfig, policy: nn.Module, episodes: int, seed: int) -> list[float]:
    """DQN's evaluation: ``evaluate``, refused in one line for a parametric-action policy, whose
    candidate sets come with logged data and no env offers."""
    if isinstance(policy, ParametricGreedyPolicy):
        raise UserError(
            "a parametric-action policy chooses among candidate sets no env offers; it has no online "
            "evaluation",
            code="eval-parametric-actions",
        )
    return evaluate(cfg, policy, episodes, seed)


def env_id(cfg: RunConfig) -> str:
    """What episodes are played in (``distrl eval``'s ``env``)."""
    return cfg.env.id


@torch.no_grad()
def _run_episodes(cfg: RunConfig, policy: nn.Module, seeds: list[int]) -> list[float]:
    """Run one episode per env; envs that finish keep stepping but are no longer counted."""
    device = next(policy.parameters()).device
    env = make_vec_env(cfg.env, seeds, device)
    obs = env.reset()
    totals = torch.zeros(len(seeds), dtype=torch.float64, device=device)
    running = torch.ones(len(seeds), dtype=torch.bool, device=device)
    state_size = policy_state_size(policy)
    state = torch.zeros(len(seeds), state_size, device=device)
    while running.any():
        if state_size:  # an env's episode counts once: its state needs no reset
            actions, state = policy(obs.to(device), state)
        else:
            actions = policy(obs.to(device))
        result = env.step(actions.to(env.device))
        reward, terminated, truncated = (x.to(device) for x in result[1:4])
        if state_size and result.life_lost is not None:  # as in training: a lost life resets it
            state = reset_ended(state, result.life_lost.to(device))
        totals += reward * running
        running &= ~(terminated | truncated)
        obs = result.obs
    env.close()
    return totals.tolist()
