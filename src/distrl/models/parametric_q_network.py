"""Q-network for parametric actions (ReAgent's parametric DQN): an action is a feature vector,
each row offers its own set of candidate actions, and Q(s, a) scores one (state, action) pair."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from distrl.models.actor_critic import mlp

if TYPE_CHECKING:  # annotations only
    import gymnasium as gym

    from distrl.config.sections import ModelConfig


class ParametricQNetwork(nn.Module):
    def __init__(self, obs_dim: int, action_dim: int, cfg: ModelConfig) -> None:
        super().__init__()
        self.action_dim = action_dim
        self.net = mlp(obs_dim + action_dim, cfg.hidden_sizes, 1, cfg.activation, out_gain=1.0)

    def forward(self, obs: torch.Tensor, candidates: torch.Tensor) -> torch.Tensor:
        """Q of every candidate: obs [batch, obs_dim], candidates [batch, K, action_dim] -> [batch, K]."""
        states = obs.unsqueeze(1).expand(-1, candidates.shape[1], -1)
        return self.net(torch.cat([states, candidates], dim=-1)).squeeze(-1)


class ParametricGreedyPolicy(nn.Module):
    """The policy to deploy: a state and its candidates in, the index of the real candidate
    (``candidate_mask``) of highest Q out."""

    input_names = ("obs", "candidates", "candidate_mask")
    dynamic_axes = {"candidates": {1: "candidates"}, "candidate_mask": {1: "candidates"}}
    """Input axes beyond the batch whose size a deployed file leaves open (``io.export``)."""

    def __init__(self, q_network: ParametricQNetwork) -> None:
        super().__init__()
        self.q_network = q_network

    def forward(
        self, obs: torch.Tensor, candidates: torch.Tensor, candidate_mask: torch.Tensor
    ) -> torch.Tensor:
        return self.q_network(obs, candidates).masked_fill(~candidate_mask, -torch.inf).argmax(dim=-1)

    def example_inputs(self, observation_space: gym.spaces.Box) -> tuple[torch.Tensor, ...]:
        """Inputs to trace an export with: 2 states of 3 candidates each (not 1: a traced size
        of 1 would be fixed in the file)."""
        return (
            torch.zeros(2, observation_space.shape[0]),
            torch.zeros(2, 3, self.q_network.action_dim),
            torch.ones(2, 3, dtype=torch.bool),
        )
