"""TD3's actor: mu(s) in [-1, 1], an MLP after its own encoder (images through
``model.encoder``'s CNN) ending in tanh, torch's default initialisation (as SB3 and CleanRL). Its
critics are the shared twin Q-networks (``models.continuous.TwinQ``); the env's bounds are met
through ``ActionScale``."""

from __future__ import annotations

from typing import TYPE_CHECKING

import gymnasium as gym
import torch
from torch import nn

from distrl.models.actor_critic import mlp
from distrl.models.continuous import ScaledDeterministicActor
from distrl.models.encoders import encode, observation_encoder

if TYPE_CHECKING:
    from distrl.config.run import RunConfig
    from distrl.config.sections import ModelConfig
    from distrl.io.train_state import SavedState


class DeterministicActor(nn.Module):
    """mu(s) = tanh(MLP(encoder(s))): one action in [-1, 1] per observation."""

    def __init__(self, observation_space: gym.Space, action_space: gym.spaces.Box, cfg: ModelConfig) -> None:
        super().__init__()
        self.action_dim = int(action_space.shape[0])
        self.encoder, features = observation_encoder(observation_space, cfg)
        self.low_precision: torch.dtype | None = None
        """The encoder's autocast dtype (``distrl.precision``); None: float32."""
        self.net = mlp(features, cfg.hidden_sizes, self.action_dim, cfg.activation, out_gain=None)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(encode(self.encoder, obs, self.low_precision)))

    def deterministic(self, obs: torch.Tensor) -> torch.Tensor:
        """What ``ScaledDeterministicActor`` deploys: mu(s) itself."""
        return self(obs)


def td3_policy(cfg: RunConfig, saved: SavedState) -> nn.Module:
    """``Algorithm.deployable_policy``: a checkpoint's actor, its actions in the env's bounds."""
    actor = DeterministicActor(saved.observation_space, saved.action_space, cfg.model)
    actor.load_state_dict(saved.module_tensors("actor"))
    return ScaledDeterministicActor(actor, saved.action_space)
