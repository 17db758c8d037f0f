"""Tensors grouped into buckets for collectives: one collective per bucket rather than per tensor,
and no bucket so large that a rank holds a second whole copy of the model to send it."""

from __future__ import annotations

import torch

BROADCAST_BUCKET_BYTES = 64 * 2**20
"""The most bytes one broadcast of initial weights carries."""


def buckets(tensors: list[torch.Tensor], limit: int) -> list[list[torch.Tensor]]:
    """``tensors`` in order, in runs of one dtype and device of at most ``limit`` bytes (a larger
    tensor alone)."""
    buckets: list[list[torch.Tensor]] = []
    size = 0
    for t in tensors:
        nbytes = t.numel() * t.element_size()
        last = buckets[-1] if buckets else None
        if last and last[0].dtype == t.dtype and last[0].device == t.device and size + nbytes <= limit:
            last.append(t)
            size += nbytes
        else:
            buckets.append([t])
            size = nbytes
    return buckets
