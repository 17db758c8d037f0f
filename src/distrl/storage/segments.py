"""What collectors hand a rank, ``[steps, envs, ...]`` per field: the parts of its env workers
(the same steps over consecutive envs) are joined along the env axis.

Every segment carries the version of the policy it was acted with (``policy_version``: the
learner's updates whose weights acted) and its behaviour log-probabilities, so a learner can tell
a sample's age (its own version minus the segment's) and correct for acting with older weights.
The version is one per segment (its oldest part's, when parts differ), not per step: a
collector takes weights only between segments (a rank's own envs act with the live modules,
which change only in the update after collecting; an env worker or collector process loads the
weights it was sent before stepping), so no segment straddles an update."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, Protocol, Self

import torch


class Segment(Protocol):
    """What a collector hands back (``RolloutSegment``, ``TransitionSegment``)."""

    obs: torch.Tensor
    policy_version: int

    @property
    def steps(self) -> int: ...

    @classmethod
    def join(cls, parts: list[Self], device: torch.device) -> Self:
        """Segments of the same steps over consecutive envs as one, on ``device``."""
        ...


def join_along_envs(
    parts: list[Any], names: Iterable[str], per_env: Collection[str], device: torch.device
) -> dict[str, torch.Tensor]:
    """Each field ``names`` of ``parts`` concatenated over the envs (``per_env`` fields are
    ``[envs]``, the others ``[steps, envs, ...]``), on ``device``."""
    return {
        name: torch.cat([getattr(part, name) for part in parts], dim=0 if name in per_env else 1).to(device)
        for name in names
    }


def joined_version(parts: list[Any]) -> int:
    """The version the joined ``parts`` acted with: the oldest of theirs (parts sent the weights of
    one update all have it; collector processes acting with the newest weights each has may
    differ, and a segment's age is then its oldest part's)."""
    return min(part.policy_version for part in parts)
