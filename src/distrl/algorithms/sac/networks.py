"""SAC's actor (Haarnoja et al. 2018): a tanh-squashed Gaussian, its own encoder (images through
``model.encoder``'s CNN), torch's default initialisation, as in SB3 and CleanRL. Its actions are in
[-1, 1]; its critics, the action scaling and the deployable policy are the shared
``models.continuous``'s."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn

from distrl.models.actor_critic import ACTIVATIONS, gaussian_log_prob, mlp
from distrl.models.continuous import ScaledDeterministicActor
from distrl.models.encoders import encode, observation_encoder

if TYPE_CHECKING:  # annotations only
    from distrl.config.run import RunConfig
    from distrl.config.sections import ModelConfig
    from distrl.io.train_state import SavedState

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
"""The actor's log-std is clamped to these (SB3's bounds)."""


class SquashedGaussianActor(nn.Module):
    """tanh(mean + std x noise): a state-dependent diagonal Gaussian squashed into [-1, 1]."""

    def __init__(
        self, observation_space: gym.spaces.Box, action_space: gym.spaces.Box, cfg: ModelConfig
    ) -> None:
        super().__init__()
        self.action_dim = int(action_space.shape[0])
        self.encoder, features = observation_encoder(observation_space, cfg)
        self.low_precision: torch.dtype | None = None
        """The encoder's autocast dtype (``distrl.precision``); None: float32."""
        hidden = cfg.hidden_sizes
        self.trunk = nn.Sequential(
            mlp(features, hidden[:-1], hidden[-1], cfg.activation, out_gain=None),
            ACTIVATIONS[cfg.activation](),
        )
        self.mean = nn.Linear(hidden[-1], self.action_dim)
        self.log_std = nn.Linear(hidden[-1], self.action_dim)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The Gaussian's mean and log-std, before squashing."""
        latent = self.trunk(encode(self.encoder, obs, self.low_precision))
        return self.mean(latent), self.log_std(latent).clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, obs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised actions in [-1, 1] from standard normal ``noise``, and their
        log-probabilities under the squashed Gaussian (its change of variables,
        log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u)), exact where tanh(u) rounds to +-1)."""
        mean, log_std = self(obs)
        pre_tanh = mean + log_std.exp() * noise
        squash = (2.0 * (math.log(2.0) - pre_tanh - F.softplus(-2.0 * pre_tanh))).sum(-1)
        return torch.tanh(pre_tanh), gaussian_log_prob(mean, log_std, pre_tanh) - squash

    def deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self(obs)[0])


def sac_policy(cfg: RunConfig, saved: SavedState) -> nn.Module:
    """SAC's deployable policy from a checkpoint: the actor's squashed mean."""
    actor = SquashedGaussianActor(saved.observation_space, saved.action_space, cfg.model)
    actor.load_state_dict(saved.module_tensors("actor"))
    return ScaledDeterministicActor(actor, saved.action_space)
