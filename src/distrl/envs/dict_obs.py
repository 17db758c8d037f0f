"""Dict observations as one flat tensor, so collection, storage, env-worker messages, evaluation,
export and checkpoints carry a single observation tensor whatever the env gives.

``PackedDict`` is a flat Box that knows its keys: each key's value flattened and laid end to end
in ``env.obs_keys`` order (all keys by default, in the Dict's order). A Box key is its values, a
Discrete key its index (one number, the model one-hot encodes it), a MultiBinary key its bits. The
vector is uint8 when every entry fits in a byte (uint8 images, Discrete of at most 256 values,
MultiBinary), so pixel keys keep their size; float32 otherwise (any feature-vector key, which
observation normalisation may touch). The actor-critic unpacks it by
key (``distrl.models.encoders.DictEncoder``): images to a CNN, the rest concatenated. An exported
policy takes the packed vector (``PackedDict.pack`` builds it from a Dict observation).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import gymnasium as gym
import numpy as np

from distrl.errors import UserError

ENTRY_SPACES = (gym.spaces.Box, gym.spaces.Discrete, gym.spaces.MultiBinary)


class PackedDict(gym.spaces.Box):
    def __init__(self, entries: Mapping[str, gym.spaces.Space]) -> None:
        self.entries = dict(entries)
        self.slices: dict[str, slice] = {}
        lows, highs, offset = [], [], 0
        for key, space in self.entries.items():
            low, high = _bounds(space)
            self.slices[key] = slice(offset, offset + low.size)
            offset += low.size
            lows.append(low)
            highs.append(high)
        low, high = np.concatenate(lows), np.concatenate(highs)
        fits_a_byte = all(_fits_a_byte(space) for space in self.entries.values())
        dtype = np.uint8 if fits_a_byte else np.float32
        super().__init__(low.astype(dtype), high.astype(dtype), (offset,), dtype)

    def pack(self, obs: Mapping[str, np.ndarray], batched: bool = True) -> np.ndarray:
        """``[rows, size]`` (``[size]`` when not ``batched``) from a Dict observation's arrays."""
        rows = len(next(iter(obs.values()))) if batched else None
        shape = (rows, -1) if batched else (-1,)
        parts = [np.asarray(obs[key]).reshape(shape) for key in self.entries]
        return np.concatenate(parts, axis=-1).astype(self.dtype, copy=False)

    def vector_mask(self) -> np.ndarray:
        """Which entries belong to feature-vector Box keys (not images, indices or bits): the
        ones observation normalisation may touch."""
        mask = np.zeros(self.shape, dtype=bool)
        for key, space in self.entries.items():
            if isinstance(space, gym.spaces.Box) and len(space.shape) != 3:
                mask[self.slices[key]] = True
        return mask

    def __repr__(self) -> str:
        return f"PackedDict({', '.join(f'{k}: {v}' for k, v in self.entries.items())})"

    def __eq__(self, other: object) -> bool:
        # The order is the layout: the same keys in another order pack differently.
        return isinstance(other, PackedDict) and list(self.entries.items()) == list(other.entries.items())

    def __hash__(self) -> int:
        return hash(tuple(self.entries))


def packed(space: gym.spaces.Dict, keys: Sequence[str], env_id: str) -> PackedDict:
    """``space``'s ``keys`` (all when empty) as a ``PackedDict``; one line for a key that is not
    there or whose space cannot be packed."""
    chosen = list(keys) or list(space.spaces)
    missing = [key for key in chosen if key not in space.spaces]
    if missing:
        raise UserError(
            f"env.obs_keys: {', '.join(map(repr, missing))} not in env {env_id!r}'s observations "
            f"(keys: {', '.join(space.spaces)})",
            code="env-obs-keys-missing",
        )
    for key in chosen:
        entry = space.spaces[key]
        if not isinstance(entry, ENTRY_SPACES):
            keep = [k for k in chosen if isinstance(space.spaces[k], ENTRY_SPACES)]
            raise UserError(
                f"env {env_id!r}: observation key {key!r} is a {type(entry).__name__} space, which distrl "
                f"cannot encode (Box, Discrete or MultiBinary keys only); leave it out with "
                f"env.obs_keys=[{', '.join(keep)}]",
                code="env-obs-key-unsupported",
            )
    return PackedDict({key: space.spaces[key] for key in chosen})


def _bounds(space: gym.spaces.Space) -> tuple[np.ndarray, np.ndarray]:
    if isinstance(space, gym.spaces.Box):
        return space.low.reshape(-1).astype(np.float64), space.high.reshape(-1).astype(np.float64)
    if isinstance(space, gym.spaces.Discrete):
        return np.array([float(space.start)]), np.array([float(space.start + space.n - 1)])
    size = math.prod(space.shape)  # MultiBinary
    return np.zeros(size), np.ones(size)


def _fits_a_byte(space: gym.spaces.Space) -> bool:
    """Images of bytes, small indices and bits; a feature vector (which may be normalised) never."""
    if isinstance(space, gym.spaces.Box):
        return space.dtype == np.uint8 and len(space.shape) == 3
    if isinstance(space, gym.spaces.Discrete):
        return space.start >= 0 and space.start + space.n <= 256
    return True  # MultiBinary
