"""IQL's networks (Kostrikov et al. 2021, d3rlpy's): a state-value function V(s), twin Q-networks
(``models.continuous.TwinQ``) and a Gaussian policy whose mean is tanh(mu(s)) with a state-independent
log-std. Actions inside the networks are in [-1, 1] (``models.continuous.ActionScale`` maps the
dataset's bounds)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import gymnasium as gym
import torch
from torch import nn

from distrl.models.actor_critic import gaussian_log_prob, mlp
from distrl.models.continuous import ScaledDeterministicActor
from distrl.models.encoders import encode, observation_encoder

if TYPE_CHECKING:  # annotations only
    from distrl.config.run import RunConfig
    from distrl.config.sections import ModelConfig
    from distrl.io.train_state import SavedState

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
"""The policy's log-std lies between these (d3rlpy's bounds for IQL)."""


class ValueNetwork(nn.Module):
    """V(s): ``[batch]``."""

    def __init__(self, observation_space: gym.spaces.Box, cfg: ModelConfig) -> None:
        super().__init__()
        self.encoder, features = observation_encoder(observation_space, cfg)
        self.head = mlp(features, cfg.hidden_sizes, 1, cfg.activation, out_gain=None)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.head(encode(self.encoder, obs, None)).squeeze(-1)


class TanhMeanGaussianActor(nn.Module):
    """N(tanh(mu(s)), exp(log_std)): the mean inside [-1, 1], the spread the same for every state.
    The log-std is a parameter mapped into its bounds through a sigmoid (d3rlpy's form: it starts
    midway, at -1.5, and keeps a gradient at its bounds, where a clamp would stop learning)."""

    def __init__(self, observation_space: gym.spaces.Box, action_dim: int, cfg: ModelConfig) -> None:
        super().__init__()
        self.encoder, features = observation_encoder(observation_space, cfg)
        self.mu = mlp(features, cfg.hidden_sizes, action_dim, cfg.activation, out_gain=None)
        self.log_std_logit = nn.Parameter(torch.zeros(action_dim))

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The Gaussian's mean and log-std for each observation: every weight is read here, in the
        module's own call (a sharded module's weights are whole only within it)."""
        mean = torch.tanh(self.mu(encode(self.encoder, obs, None)))
        log_std = LOG_STD_MIN + torch.sigmoid(self.log_std_logit) * (LOG_STD_MAX - LOG_STD_MIN)
        return mean, log_std.expand_as(mean)

    def deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        return self(obs)[0]

    def log_prob(self, obs: torch.Tensor, unit_actions: torch.Tensor) -> torch.Tensor:
        """log pi(a | s) of actions in [-1, 1]."""
        return gaussian_log_prob(*self(obs), unit_actions)


def iql_policy(cfg: RunConfig, saved: SavedState) -> nn.Module:
    """IQL's deployable policy from a checkpoint: the Gaussian's mean in the data's action bounds."""
    actor = TanhMeanGaussianActor(saved.observation_space, int(saved.action_space.shape[0]), cfg.model)
    actor.load_state_dict(saved.module_tensors("actor"))
    return ScaledDeterministicActor(actor, saved.action_space)
