"""SAC's acting while it collects: uniformly random actions until ``learning_starts``, then actions
sampled from the squashed Gaussian actor. Both come from one standard normal draw per env, step
and action dimension (``ActionNoise``), so splitting a rank's envs over env workers changes no
env's action. Its collector (``Algorithm.collector``) is ``squashed_gaussian_collector``."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import gymnasium as gym
import torch
from torch import nn

from distrl.algorithms.sac.networks import SquashedGaussianActor
from distrl.collect.base import CollectorInputs
from distrl.collect.rollout import ActionNoise
from distrl.collect.transitions import TransitionCollector
from distrl.models.continuous import ActionScale

if TYPE_CHECKING:
    from distrl.config.run import RunConfig


def sac_noise(seed: list[int], rows: int, action_dim: int, part: slice, device: torch.device) -> ActionNoise:
    return ActionNoise((rows, action_dim), True, seed, part, device)


class SquashedGaussianExploration(nn.Module):
    """Env actions from ``actor``: sampled (``exploration`` 0), or uniform in the bounds
    (``exploration`` 1: before ``learning_starts``, SB3's random warm-up). Their log-probabilities
    are densities over the actor's ``[-1, 1]`` actions, as SAC's loss reads them (the env's
    differ by the bounds' constant log-Jacobian, which cancels in any ratio): the squashed
    Gaussian's, or the uniform's, -log 2 per action dimension."""

    def __init__(self, actor: SquashedGaussianActor, action_space: gym.spaces.Box) -> None:
        super().__init__()
        self.actor = actor
        self.scale = ActionScale(action_space).to(next(actor.parameters()).device)
        self.uniform_log_prob = -actor.action_dim * math.log(2.0)

    def forward(
        self, obs: torch.Tensor, noise: torch.Tensor, exploration: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if exploration >= 1.0:
            unit = torch.special.erf(noise / math.sqrt(2.0))  # 2 Phi(z) - 1: uniform in (-1, 1)
            log_probs = unit.new_full(unit.shape[:-1], self.uniform_log_prob)
        else:
            unit, log_probs = self.actor.sample(obs, noise)
        return self.scale.to_env(unit), log_probs


def squashed_gaussian_collector(inputs: CollectorInputs) -> TransitionCollector:
    """SAC's collector (``Algorithm.collector``), acting with the ``actor`` of ``inputs.modules``."""
    actor = inputs.modules["actor"]
    noise = sac_noise(inputs.noise_seed, inputs.noise_rows, actor.action_dim, inputs.part, inputs.device)
    exploring = SquashedGaussianExploration(actor, inputs.env.action_space)
    return TransitionCollector(inputs.cfg, inputs.env, exploring, noise, inputs.device, inputs.clock)


def actor_copies(
    cfg: RunConfig, observation_space: gym.Space, action_space: gym.Space, device: torch.device
) -> dict[str, nn.Module]:
    """What SAC acts with, freshly built (``Algorithm.acting``)."""
    return {"actor": SquashedGaussianActor(observation_space, action_space, cfg.model).to(device)}
