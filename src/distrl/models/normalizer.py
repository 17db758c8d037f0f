"""Running mean/variance of a stream, kept in float64 and updated from batch moments.

Updates take (count, mean, M2) of a new batch, so a caller can merge the batch moments of all
ranks first (``Comm.merge_moments``) and every rank applies the same increment: statistics stay
identical across ranks and the shared history is never summed twice.
"""

from __future__ import annotations

import torch
from torch import nn


def batch_moments(x: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor]:
    """(count, mean, sum of squared deviations) of ``x`` over its first dimension."""
    x = x.double().reshape(x.shape[0], -1) if x.dim() > 1 else x.double().reshape(-1, 1)
    mean = x.mean(dim=0)
    return float(x.shape[0]), mean, ((x - mean) ** 2).sum(dim=0)


class RunningMeanStd(nn.Module):
    """Mean and variance of everything seen so far; buffers so they travel in state_dict."""

    def __init__(
        self, shape: tuple[int, ...], epsilon: float = 1e-8, only: torch.Tensor | None = None
    ) -> None:
        """``only``: a bool mask of the entries ``normalize`` touches (a packed Dict's feature
        vectors); the others pass as they are. Statistics are kept for all."""
        super().__init__()
        self.register_buffer("mean", torch.zeros(shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(shape, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))
        self.only: torch.Tensor | None
        # Derived from the observation space, so not saved: checkpoints keep their keys.
        self.register_buffer("only", only, persistent=False)
        self.epsilon = epsilon

    def update_from_moments(self, count: float, mean: torch.Tensor, m2: torch.Tensor) -> None:
        """Merge a batch's moments into the running ones (Chan et al. parallel algorithm)."""
        if count <= 0:
            return
        mean = mean.reshape(self.mean.shape).to(self.mean)
        m2 = m2.reshape(self.mean.shape).to(self.mean)
        total = self.count + count
        delta = mean - self.mean
        old_m2 = self.var * self.count
        new_m2 = old_m2 + m2 + delta**2 * self.count * count / total
        self.mean += delta * count / total
        self.var.copy_(new_m2 / total)
        self.count.copy_(total)

    def normalize(self, x: torch.Tensor, clip: float) -> torch.Tensor:
        std = torch.sqrt(self.var + self.epsilon).to(x.dtype)
        normalized = torch.clamp((x - self.mean.to(x.dtype)) / std, -clip, clip)
        return normalized if self.only is None else torch.where(self.only, normalized, x)

    def scale(self, x: torch.Tensor, clip: float) -> torch.Tensor:
        """Divide by the running std without centring (reward scaling)."""
        std = torch.sqrt(self.var + self.epsilon).to(x.dtype)
        return torch.clamp(x / std, -clip, clip)
