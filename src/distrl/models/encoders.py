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
from torch.nn import functional as F

from distrl.envs.dict_obs import PackedDict
from distrl.errors import UserError

if TYPE_CHECKING:  # annotations only
    from distrl.config.sections import ModelConfig

NATURE_CNN_FEATURES = 512
NATURE_CNN_LAYERS = ((32, 8, 4), (64, 4, 2), (64, 3, 1))
"""(channels, kernel, stride) of each convolution (Mnih et al. 2015)."""
IMPALA_CHANNELS = (16, 32, 32)
IMPALA_FEATURES = 256


def is_image(space: gym.spaces.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 3


def has_images(space: gym.spaces.Space) -> bool:
    """An image, or a packed Dict with an image key: what a CNN reads (``train.mixed_precision``'s
    heavy models)."""
    if isinstance(space, PackedDict):
        return any(is_image(entry) for entry in space.entries.values())
    return is_image(space)


def channels_last(shape: tuple[int, ...], channels: str) -> bool:
    """Whether an image of ``shape`` holds its channels on its last axis (module docstring)."""
    if channels != "auto":
        return channels == "last"
    return shape[-1] <= 4 < shape[0]


class ImageEncoder(nn.Module):
    """What image encoders share: where the channels are, the 1/255 scale of integer frames, and
    the memory layout the convolutions read. A subclass builds ``net`` and sets ``features``."""

    def __init__(self, space: gym.spaces.Box, cfg: ModelConfig) -> None:
        super().__init__()
        self.channels_last = channels_last(space.shape, cfg.channels)
        self.channels, *size = (space.shape[2], *space.shape[:2]) if self.channels_last else space.shape
        self.size: tuple[int, int] = tuple(size)
        """Height and width of a frame."""
        self.scale = 1.0 / 255.0 if np.issubdtype(space.dtype, np.integer) else 1.0
        self.net: nn.Sequential
        self.features: int

    def too_small(self, name: str, smallest: str) -> UserError:
        return UserError(
            f"image observations of {self.size[0]}x{self.size[1]} pixels are too small for "
            f"model.encoder={name} (at least {smallest})",
            code="model-image-too-small",
        )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        x = obs.to(self.net[0].weight.dtype) * self.scale
        if self.channels_last:
            x = x.permute(0, 3, 1, 2)
        if not torch.is_autocast_enabled(x.device.type):
            # NHWC in memory for float32 convolutions (the weights stay as they are): faster on
            # the CPU measured, and slower under bf16 autocast there (BENCHMARKS.md).
            x = x.contiguous(memory_format=torch.channels_last)
        return self.net(x)


class NatureCNN(ImageEncoder):
    """Three convolutions and a 512-unit layer, ReLU throughout (DQN's and CleanRL's Atari PPO
    encoder), orthogonal weights with gain sqrt(2) and zero biases as CleanRL initialises them."""

    def __init__(self, space: gym.spaces.Box, cfg: ModelConfig) -> None:
        super().__init__(space, cfg)
        channels, size = self.channels, list(self.size)
        layers: list[nn.Module] = []
        for out_channels, kernel, stride in NATURE_CNN_LAYERS:
            size = [(s - kernel) // stride + 1 for s in size]
            if min(size) < 1:
                raise self.too_small("nature_cnn", "36x36; model.encoder=impala_cnn reads any size")
            layers += [_orthogonal(nn.Conv2d(channels, out_channels, kernel, stride)), nn.ReLU()]
            channels = out_channels
        layers += [
            nn.Flatten(),
            _orthogonal(nn.Linear(channels * math.prod(size), NATURE_CNN_FEATURES)),
            nn.ReLU(),
        ]
        self.net = nn.Sequential(*layers)
        self.features = NATURE_CNN_FEATURES


class ResidualBlock(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.convs = nn.Sequential(
            nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.convs(x)


class ImpalaCNN(ImageEncoder):
    """IMPALA's deep encoder (Espeholt et al. 2018, CleanRL's Procgen PPO): three stages of a 3x3
    convolution, a 3x3 max-pool of stride 2 and two residual blocks (16, 32, 32 channels), then
    ReLU, a 256-unit layer and ReLU."""

    def __init__(self, space: gym.spaces.Box, cfg: ModelConfig) -> None:
        super().__init__(space, cfg)
        channels, size = self.channels, list(self.size)
        layers: list[nn.Module] = []
        for out_channels in IMPALA_CHANNELS:
            layers += [
                nn.Conv2d(channels, out_channels, 3, padding=1),
                nn.MaxPool2d(3, stride=2, padding=1),
                ResidualBlock(out_channels),
                ResidualBlock(out_channels),
            ]
            channels, size = out_channels, [(s + 1) // 2 for s in size]
        layers += [
            nn.Flatten(),
            nn.ReLU(),
            _orthogonal(nn.Linear(channels * math.prod(size), IMPALA_FEATURES)),
            nn.ReLU(),
        ]
        self.net = nn.Sequential(*layers)
        self.features = IMPALA_FEATURES


def _orthogonal(layer: nn.Module) -> nn.Module:
    nn.init.orthogonal_(layer.weight, math.sqrt(2))
    nn.init.zeros_(layer.bias)
    return layer


class DictEncoder(nn.Module):
    """A packed Dict observation (``distrl.envs.dict_obs``) read key by key: each image key
    through its own image encoder (``model.encoder``; with ``mlp``, its values flattened as they
    are, for symbolic grids such as MiniGrid's), Discrete keys one-hot, Box vectors and
    MultiBinary bits as they are; all concatenated for the heads' MLPs."""

    def __init__(self, space: PackedDict, cfg: ModelConfig) -> None:
        super().__init__()
        self.space = space
        images = {k: s for k, s in space.entries.items() if is_image(s) and cfg.encoder != "mlp"}
        self.images = nn.ModuleDict({key: image_encoder(entry, cfg) for key, entry in images.items()})
        self.features = 0
        for key, entry in space.entries.items():
            if key in self.images:
                self.features += self.images[key].features
            else:
                self.features += (
                    int(entry.n) if isinstance(entry, gym.spaces.Discrete) else math.prod(entry.shape)
                )

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        parts = []
        for key, entry in self.space.entries.items():
            values = obs[:, self.space.slices[key]]
            if key in self.images:
                parts.append(self.images[key](values.reshape(-1, *entry.shape)))
            elif isinstance(entry, gym.spaces.Discrete):
                parts.append(F.one_hot(values[:, 0].long() - int(entry.start), int(entry.n)).float())
            else:
                parts.append(values.float())
        return torch.cat(parts, dim=-1)


def observation_encoder(observation: int | gym.spaces.Box, cfg: ModelConfig) -> tuple[nn.Module, int]:
    """(what turns ``observation`` into features, their width): an image encoder for images, a
    ``DictEncoder`` for packed Dicts, nothing for feature vectors (``observation`` may be their
    length)."""
    if isinstance(observation, PackedDict):
        encoder: nn.Module = DictEncoder(observation, cfg)
        return encoder, encoder.features
    if isinstance(observation, gym.spaces.Box) and is_image(observation):
        encoder = image_encoder(observation, cfg)
        return encoder, encoder.features
    return nn.Identity(), observation if isinstance(observation, int) else observation.shape[0]


def encode(encoder: nn.Module, obs: torch.Tensor, low_precision: torch.dtype | None) -> torch.Tensor:
    """``encoder``'s features in float32, computed under autocast to ``low_precision`` where set
    (``distrl.precision``; the weights stay float32)."""
    if low_precision is None:
        return encoder(obs)
    with torch.autocast(obs.device.type, dtype=low_precision):
        return encoder(obs).float()


def image_encoder(space: gym.spaces.Box, cfg: ModelConfig) -> ImageEncoder:
    """The encoder ``model.encoder`` names for image observations (``auto``: the Nature CNN)."""
    if cfg.encoder == "mlp":
        raise UserError(
            f"model.encoder=mlp: the observations are images {space.shape}; use nature_cnn, impala_cnn "
            "(or auto)",
            code="model-mlp-on-images",
        )
    return ImpalaCNN(space, cfg) if cfg.encoder == "impala_cnn" else NatureCNN(space, cfg)
