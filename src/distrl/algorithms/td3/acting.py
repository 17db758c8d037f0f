"""TD3's acting while it collects: uniformly random actions until ``learning_starts``, then
mu(s) plus Gaussian exploration noise, clipped to the bounds. Both come from one standard normal
draw per env, step and action dimension (``ActionNoise``), so splitting a rank's envs over env
workers or collector processes changes no env's action."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import gymnasium as gym
import torch
from torch import nn

from distrl.algorithms.td3.networks import DeterministicActor
from distrl.collect.base import CollectorInputs
from distrl.collect.rollout import ActionNoise
from distrl.collect.transitions import TransitionCollector
from distrl.models.continuous import ActionScale

if TYPE_CHECKING:
    from distrl.config.run import RunConfig


class GaussianExploration(nn.Module):
    """Env actions from ``actor``: mu(s) + ``noise_std`` x noise, clipped to [-1, 1] (``exploration``
    0), or uniform in the bounds (``exploration`` 1: before ``learning_starts``), then scaled to
    the env's bounds; with the densities of the unit actions (TD3's update reads none)."""

    def __init__(self, actor: DeterministicActor, action_space: gym.spaces.Box, noise_std: float) -> None:
        super().__init__()
        self.actor = actor
        self.noise_std = noise_std
        self.scale = ActionScale(action_space).to(next(actor.parameters()).device)

    def forward(
        self, obs: torch.Tensor, noise: torch.Tensor, exploration: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if exploration >= 1.0:
            unit = torch.special.erf(noise / math.sqrt(2.0))  # 2 Phi(z) - 1: uniform in (-1, 1)
            log_probs = unit.new_full(unit.shape[:-1], -self.actor.action_dim * math.log(2.0))
            return self.scale.to_env(unit), log_probs
        unit = (self.actor(obs) + self.noise_std * noise).clamp(-1.0, 1.0)
        if self.noise_std == 0.0:  # deterministic actions have no density: recorded as 0
            return self.scale.to_env(unit), unit.new_zeros(unit.shape[:-1])
        # The Gaussian's density before clipping.
        log_probs = (-0.5 * noise**2 - math.log(self.noise_std) - 0.5 * math.log(2 * math.pi)).sum(-1)
        return self.scale.to_env(unit), log_probs


def td3_collector(inputs: CollectorInputs) -> TransitionCollector:
    """``Algorithm.collector``: acts with the ``actor`` of ``inputs.modules`` (the rank's live one,
    or a worker's copy)."""
    actor = inputs.modules["actor"]
    noise = ActionNoise(
        (inputs.noise_rows, actor.action_dim), True, inputs.noise_seed, inputs.part, inputs.device
    )
    exploring = GaussianExploration(actor, inputs.env.action_space, inputs.cfg.algo.exploration_noise)
    return TransitionCollector(inputs.cfg, inputs.env, exploring, noise, inputs.device, inputs.clock)


def actor_copies(
    cfg: RunConfig, observation_space: gym.Space, action_space: gym.Space, device: torch.device
) -> dict[str, nn.Module]:
    """``Algorithm.acting``: a fresh actor, which workers load each policy version's weights into."""
    return {"actor": DeterministicActor(observation_space, action_space, cfg.model).to(device)}
