"""Q-network for discrete actions: an observation to one value per action. Feature vectors go
through an MLP; images through ``model.encoder``'s CNN and one linear layer (CleanRL's Atari DQN);
packed Dicts through their ``DictEncoder`` and an MLP."""

from __future__ import annotations

from typing import TYPE_CHECKING

import gymnasium as gym
import torch
from torch import nn

from distrl.models.actor_critic import mlp
from distrl.models.encoders import ImageEncoder, encode, observation_encoder

if TYPE_CHECKING:  # annotations only
    from distrl.config.sections import ModelConfig


class QNetwork(nn.Module):
    def __init__(self, observation: int | gym.spaces.Box, num_actions: int, cfg: ModelConfig) -> None:
        """``observation``: the observation space, or the length of a feature vector."""
        super().__init__()
        self.num_actions = num_actions
        self.encoder, features = observation_encoder(observation, cfg)
        self.low_precision: torch.dtype | None = None
        """The encoder's autocast dtype (``distrl.precision``); None: float32."""
        hidden = [] if isinstance(self.encoder, ImageEncoder) else cfg.hidden_sizes
        self.net = mlp(features, hidden, num_actions, cfg.activation, out_gain=1.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(encode(self.encoder, obs, self.low_precision))


class GreedyPolicy(nn.Module):
    """The policy to evaluate or deploy: raw observation in, the action of highest Q out."""

    def __init__(self, q_network: QNetwork) -> None:
        super().__init__()
        self.q_network = q_network

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q_network(obs).argmax(dim=-1)
