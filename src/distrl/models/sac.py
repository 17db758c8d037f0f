"""SAC's networks (Haarnoja et al. 2018): a tanh-squashed Gaussian actor and twin Q-networks on
(observation, action), each with its own encoder (images through ``model.encoder``'s CNN) and
torch's default initialisation, as in SB3 and CleanRL. Actions inside the networks are in
[-1, 1]; ``ActionScale`` maps them to the env's bounds and back."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import gymnasium as gym
import torch
import torch.nn.functional as F
from torch import nn

from distrl.models.actor_critic import ACTIVATIONS, gaussian_log_prob, mlp
from distrl.models.encoders import encode, observation_encoder

if TYPE_CHECKING:  # annotations only
    from distrl.config.run import RunConfig
    from distrl.config.sections import ModelConfig
    from distrl.io.train_state import SavedState

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0
"""The actor's log-std is clamped to these (SB3's bounds)."""


class ActionScale(nn.Module):
    """Between [-1, 1] (the networks') and a Box's bounds (the env's), per dimension."""

    def __init__(self, action_space: gym.spaces.Box) -> None:
        super().__init__()
        self.register_buffer("low", torch.as_tensor(action_space.low, dtype=torch.float32))
        self.register_buffer("high", torch.as_tensor(action_space.high, dtype=torch.float32))

    def to_env(self, unit: torch.Tensor) -> torch.Tensor:
        return self.low + (unit + 1.0) * 0.5 * (self.high - self.low)

    def to_unit(self, actions: torch.Tensor) -> torch.Tensor:
        return 2.0 * (actions - self.low) / (self.high - self.low) - 1.0


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


class TwinQ(nn.Module):
    """Two independent Q(s, a) networks; ``forward`` gives both, ``[batch, 2]``."""

    def __init__(self, observation_space: gym.spaces.Box, action_dim: int, cfg: ModelConfig) -> None:
        super().__init__()
        self.low_precision: torch.dtype | None = None
        self.encoders = nn.ModuleList()
        self.heads = nn.ModuleList()
        for _ in range(2):
            encoder, features = observation_encoder(observation_space, cfg)
            self.encoders.append(encoder)
            self.heads.append(mlp(features + action_dim, cfg.hidden_sizes, 1, cfg.activation, out_gain=None))

    def forward(self, obs: torch.Tensor, unit_actions: torch.Tensor) -> torch.Tensor:
        return torch.cat(
            [
                head(torch.cat([encode(encoder, obs, self.low_precision), unit_actions], dim=-1))
                for encoder, head in zip(self.encoders, self.heads, strict=True)
            ],
            dim=-1,
        )


class ScaledDeterministicActor(nn.Module):
    """The policy to evaluate or deploy: raw observation in, the actor's ``deterministic`` action
    (in [-1, 1]) mapped to the env's bounds out."""

    state_size = 0

    def __init__(self, actor: nn.Module, action_space: gym.spaces.Box) -> None:
        super().__init__()
        self.actor = actor
        self.scale = ActionScale(action_space)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.scale.to_env(self.actor.deterministic(obs))


def sac_policy(cfg: RunConfig, saved: SavedState) -> nn.Module:
    """SAC's deployable policy from a checkpoint: the actor's squashed mean."""
    actor = SquashedGaussianActor(saved.observation_space, saved.action_space, cfg.model)
    actor.load_state_dict(saved.module_tensors("actor"))
    return ScaledDeterministicActor(actor, saved.action_space)
