"""Q-network for discrete actions: an MLP from an observation to one value per action."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from distrl.models.actor_critic import mlp

if TYPE_CHECKING:  # annotations only
    from distrl.config.sections import ModelConfig


class QNetwork(nn.Module):
    def __init__(self, obs_dim: int, num_actions: int, cfg: ModelConfig) -> None:
        super().__init__()
        self.num_actions = num_actions
        self.net = mlp(obs_dim, cfg.hidden_sizes, num_actions, cfg.activation, out_gain=1.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)


class GreedyPolicy(nn.Module):
    """The policy to evaluate or deploy: raw observation in, the action of highest Q out."""

    def __init__(self, q_network: QNetwork) -> None:
        super().__init__()
        self.q_network = q_network

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.q_network(obs).argmax(dim=-1)
