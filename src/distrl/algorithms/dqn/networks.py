"""DQN's networks: one value per action (Discrete actions: ``models.q_network``), or a network
scoring (state, action features) pairs for parametric actions (``models.parametric_q_network``,
ReAgent's parametric DQN); the greedy policy in them, and that policy read back from a
checkpoint as DQN's deployable form."""

from __future__ import annotations

from typing import TYPE_CHECKING

import gymnasium as gym
import torch
from torch import nn

from distrl.envs.dict_obs import PackedDict
from distrl.errors import UserError
from distrl.models.encoders import has_images
from distrl.models.parametric_q_network import ParametricGreedyPolicy, ParametricQNetwork
from distrl.models.q_network import GreedyPolicy, QNetwork
from distrl.precision import low_precision

if TYPE_CHECKING:
    from distrl.config.run import RunConfig
    from distrl.io.train_state import SavedState


def make_q_network(
    cfg: RunConfig,
    observation_space: gym.spaces.Box,
    action_space: gym.spaces.Space,
    device: torch.device | None = None,
) -> nn.Module:
    """One value per action for Discrete actions (feature vectors, images, packed Dicts); for
    parametric actions (a Box of one action's features) a network scoring (state, action
    features) pairs of feature vectors. On ``device`` (a learner's or an env worker's), its image
    encoder in the precision ``train.mixed_precision`` gives there; on the CPU in float32 without."""
    if isinstance(action_space, gym.spaces.Discrete):
        q_network = QNetwork(observation_space, int(action_space.n), cfg.model)
        if device is not None:
            heavy = has_images(observation_space)
            q_network.to(device).low_precision = low_precision(cfg.train.mixed_precision, device, heavy)
        return q_network
    if len(observation_space.shape) != 1 or isinstance(observation_space, PackedDict):
        raise UserError(
            f"parametric actions (algo.name=dqn on a Box action space): observations {observation_space} "
            "must be a feature vector",
            code="model-parametric-observations",
        )
    return ParametricQNetwork(observation_space.shape[0], action_space.shape[0], cfg.model).to(device)


def greedy_policy(q_network: nn.Module) -> nn.Module:
    if isinstance(q_network, ParametricQNetwork):
        return ParametricGreedyPolicy(q_network)
    return GreedyPolicy(q_network)


def q_policy(cfg: RunConfig, saved: SavedState) -> nn.Module:
    """DQN's deployable policy from a checkpoint: greedy in its Q-network."""
    q_network = make_q_network(cfg, saved.observation_space, saved.action_space)
    q_network.load_state_dict(saved.module_tensors("q_network"))
    return greedy_policy(q_network)
