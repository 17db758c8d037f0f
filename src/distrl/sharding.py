"""How global counts are shared out over ranks: envs, batch samples, evaluation episodes.

``env.num_envs`` counts envs over all ranks and is split as evenly as the ranks allow, so adding
ranks keeps the global batch (and learning per env step) of one process; ``env.num_envs_per_rank``
instead gives every rank the same count and the global batch grows with the ranks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from distrl.errors import UserError

if TYPE_CHECKING:
    from distrl.config.sections import EnvConfig


@dataclass(frozen=True)
class EnvShard:
    """A rank's envs: global indices ``first .. first + count - 1`` of ``global_count``."""

    first: int
    count: int
    global_count: int
    min_count: int
    """The fewest envs any rank has (ranks differ by at most one)."""


def even_split(total: int, rank: int, world_size: int) -> tuple[int, int]:
    """(first index, count) of ``rank``'s share of ``total`` items: the first ``total % world_size``
    ranks take one more, so shares differ by at most one."""
    base, extra = divmod(total, world_size)
    return rank * base + min(rank, extra), base + (rank < extra)


def shard_envs(cfg: EnvConfig, rank: int, world_size: int) -> EnvShard:
    if cfg.num_envs_per_rank is not None:
        per_rank = cfg.num_envs_per_rank
        return EnvShard(rank * per_rank, per_rank, per_rank * world_size, per_rank)
    total = cfg.num_envs
    if total < world_size:
        raise UserError(
            f"env.num_envs={total} counts envs over all ranks and is fewer than the {world_size} ranks; "
            f"give every rank at least one (env.num_envs >= {world_size}) or set env.num_envs_per_rank",
            code="sharding-envs-fewer-than-ranks",
        )
    first, count = even_split(total, rank, world_size)
    return EnvShard(first, count, total, total // world_size)


def env_counts(cfg: EnvConfig, world_size: int) -> list[int]:
    """Every rank's number of envs."""
    return [shard_envs(cfg, rank, world_size).count for rank in range(world_size)]


def even_counts(total: int, world_size: int) -> list[int]:
    """Every rank's share of ``total`` items split by ``even_split``."""
    return [even_split(total, rank, world_size)[1] for rank in range(world_size)]
