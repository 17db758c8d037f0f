"""Observation and action spaces as JSON, so a checkpoint rebuilds its policy without an env."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from distrl.envs.dict_obs import PackedDict


def space_to_json(space: gym.spaces.Space) -> dict[str, Any]:
    if isinstance(space, gym.spaces.Discrete):
        return {"type": "Discrete", "n": int(space.n), "start": int(space.start)}
    if isinstance(space, gym.spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "nvec": [int(n) for n in space.nvec]}
    if isinstance(space, PackedDict):
        # A list, not an object: the packing order is the keys' order, which JSON objects lose.
        return {
            "type": "PackedDict",
            "entries": [[key, space_to_json(s)] for key, s in space.entries.items()],
        }
    if isinstance(space, gym.spaces.MultiBinary):
        return {"type": "MultiBinary", "n": int(space.n) if np.ndim(space.n) == 0 else list(space.n)}
    if isinstance(space, gym.spaces.Box):
        return {
            "type": "Box",
            "shape": list(space.shape),
            "dtype": str(space.dtype),
            # JSON has no inf: unbounded entries are written as null; bounds shared by every
            # entry (an image's 0 and 255) once.
            "low": _bounds(space.low),
            "high": _bounds(space.high),
        }
    raise TypeError(f"space {space} has no JSON form")


def space_from_json(data: dict[str, Any]) -> gym.spaces.Space:
    if data["type"] == "Discrete":
        return gym.spaces.Discrete(data["n"], start=data.get("start", 0))
    if data["type"] == "MultiDiscrete":
        return gym.spaces.MultiDiscrete(data["nvec"])
    if data["type"] == "PackedDict":
        return PackedDict({key: space_from_json(entry) for key, entry in data["entries"]})
    if data["type"] == "MultiBinary":
        return gym.spaces.MultiBinary(data["n"])
    if data["type"] == "Box":
        low = _read_bounds(data["low"], data["shape"], data["dtype"], -np.inf)
        high = _read_bounds(data["high"], data["shape"], data["dtype"], np.inf)
        return gym.spaces.Box(low, high, dtype=data["dtype"])
    raise ValueError(f"unknown space type {data['type']!r}")


def _bounds(values: np.ndarray) -> float | None | list[float | None]:
    flat = [float(x) if np.isfinite(x) else None for x in values.reshape(-1)]
    return flat[0] if flat and all(x == flat[0] for x in flat) else flat


def _read_bounds(bounds: Any, shape: list[int], dtype: str, unbounded: float) -> np.ndarray:
    """``_bounds``'s form (one value for every entry, or one each) as an array of ``shape``."""
    values = np.array([unbounded if x is None else x for x in np.atleast_1d(np.array(bounds, dtype=object))])
    return np.broadcast_to(values.astype(dtype), (int(np.prod(shape)),)).reshape(shape).copy()
