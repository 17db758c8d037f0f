"""What continuous-action algorithms share (SAC, TD3, IQL): the map between the networks' actions
in [-1, 1] and a Box's bounds, twin Q-networks on (observation, action), each with its own encoder
(images through ``model.encoder``'s CNN) and torch's default initialisation, as in SB3 and
CleanRL, and the deployable policy of a deterministic actor."""

from __future__ import annotations

from typing import TYPE_CHECKING

import gymnasium as gym
import torch
from torch import nn

from distrl.models.actor_critic import mlp
from distrl.models.encoders import encode, observation_encoder

if TYPE_CHECKING:  # annotations only
    from distrl.config.sections import ModelConfig


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
