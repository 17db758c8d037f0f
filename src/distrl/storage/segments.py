"""What collectors hand a rank, ``[steps, envs, ...]`` per field: the parts of its env workers
(the same steps over consecutive envs) are joined along the env axis."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

import torch


def join_along_envs(
    parts: list[Any], names: Iterable[str], per_env: Collection[str], device: torch.device
) -> dict[str, torch.Tensor]:
    """Each field ``names`` of ``parts`` concatenated over the envs (``per_env`` fields are
    ``[envs]``, the others ``[steps, envs, ...]``), on ``device``."""
    return {
        name: torch.cat([getattr(part, name) for part in parts], dim=0 if name in per_env else 1).to(device)
        for name in names
    }
