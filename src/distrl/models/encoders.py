"""Encoders: what turns an observation into features for the actor and critic heads.

A rank-1 Box is a feature vector (an MLP, ``models.actor_critic.mlp``). A rank-3 Box is an image;
its channel axis is the first when ``model.channels`` says ``first``, the last when it says
``last``, and with ``auto`` the last when that axis has at most 4 entries and the first has more
(``84x84x4``, ``36x36x3``), else the first (``4x84x84``, ``3x36x36``). Integer images (uint8
frames) are scaled by 1/255 inside the encoder, so they are stored and sent as they are.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from distrl.errors import UserError

if TYPE_CHECKING:  # annotations only
    from distrl.config.sections import ModelConfig

NATURE_CNN_FEATURES = 512
NATURE_CNN_LAYERS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
"""(channels, kernel, stride) of each convolution (Mnih et al. 2015)."""


def is_image(space: gym.spaces.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 3


def channels_last(shape: tuple[int, ...], channels: str) -> bool:
    """Whether an image of ``shape`` holds its channels on its last axis (module docstring)."""
    if channels != "auto":
        return channels == "last"
    return shape[-1] <= 4 < shape[0]


class NatureCNN(nn.Module):
    """Three convolutions and a 512-unit layer, ReLU throughout (DQN's and CleanRL's Atari PPO
    encoder), orthogonal weights with gain sqrt(2) and zero biases as CleanRL initialises them."""

    def __init__(self, space: gym.spaces.Box, cfg: ModelConfig) -> None:
        super().__init__()
        self.channels_last = channels_last(space.shape, cfg.channels)
        channels, *size = (space.shape[2], *space.shape[:2]) if self.channels_last else space.shape
        self.scale = 1.0 / 255.0 if np.issubdtype(space.dtype, np.integer) else 1.0
        layers: list[nn.Module] = []
        for out_channels, kernel, stride in NATURE_CNN_LAYERS:
            size = [(s - kernel) // stride + 1 for s in size]
            if min(size) < 1:
                raise UserError(
                    f"image observations of {space.shape[:2] if self.channels_last else space.shape[1:]} "
                    "pixels are too small for model.encoder=nature_cnn (at least 36x36)"
                )
            layers += [_orthogonal(nn.Conv2d(channels, out_channels, kernel, stride)), nn.ReLU()]
            channels = out_channels
        layers += [
            nn.Flatten(),
            _orthogonal(nn.Linear(channels * math.prod(size), NATURE_CNN_FEATURES)),
            nn.ReLU(),
        ]
        self.net = nn.Sequential(*layers)
        self.features = NATURE_CNN_FEATURES

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.to(self.net[0].weight.dtype) * self.scale
        if self.channels_last:
            x = x.permute(0, 3, 1, 2)
        if not torch.is_autocast_enabled(x.device.type):
            # NHWC in memory for float32 convolutions (the weights stay as they are): faster on
            # the CPU measured, and slower under bf16 autocast there (BENCHMARKS.md).
            x = x.contiguous(memory_format=torch.channels_last)
        return self.net(x)


def _orthogonal(layer: nn.Module) -> nn.Module:
    nn.init.orthogonal_(layer.weight, math.sqrt(2))
    nn.init.zeros_(layer.bias)
    return layer


def image_encoder(space: gym.spaces.Box, cfg: ModelConfig) -> NatureCNN:
    """The encoder ``model.encoder`` names for image observations (``auto``: the Nature CNN)."""
    if cfg.encoder == "mlp":
        raise UserError(
            f"model.encoder=mlp: the observations are images {space.shape}; use nature_cnn (or auto)"
        )
    return NatureCNN(space, cfg)
