"""How envs are split over ranks: env.num_envs is global, env.num_envs_per_rank is per rank."""

import pytest

from distrl.config.sections import EnvConfig
from distrl.errors import UserError
from distrl.sharding import even_split, shard_envs


@pytest.mark.parametrize(
    ("world_size", "counts"),
    [(1, [7]), (2, [4, 3]), (3, [3, 2, 2]), (7, [1] * 7)],
)
def test_global_count_is_split_as_evenly_as_the_ranks_allow(world_size: int, counts: list[int]) -> None:
    shards = [shard_envs(EnvConfig(num_envs=7), rank, world_size) for rank in range(world_size)]
    assert [s.count for s in shards] == counts
    # Contiguous global indices 0..6, every rank knowing the total and the smallest share.
    assert [i for s in shards for i in range(s.first, s.first + s.count)] == list(range(7))
    assert {(s.global_count, s.min_count) for s in shards} == {(7, min(counts))}


def test_per_rank_count_grows_the_global_count() -> None:
    shards = [shard_envs(EnvConfig(num_envs_per_rank=3), rank, 4) for rank in range(4)]
    assert [(s.first, s.count) for s in shards] == [(0, 3), (3, 3), (6, 3), (9, 3)]
    assert {s.global_count for s in shards} == {12}


def test_fewer_envs_than_ranks_is_one_line() -> None:
    with pytest.raises(UserError, match=r"env.num_envs=3 counts envs over all ranks and is fewer than the 4"):
        shard_envs(EnvConfig(num_envs=3), 0, 4)


def test_default_is_eight_global_envs_and_the_two_counts_exclude_each_other() -> None:
    assert (EnvConfig().num_envs, EnvConfig().num_envs_per_rank) == (8, None)
    with pytest.raises(ValueError, match="env.num_envs and env.num_envs_per_rank exclude each other"):
        EnvConfig(num_envs=4, num_envs_per_rank=2)


def test_even_split_covers_every_item_once() -> None:
    shares = [even_split(10, rank, 4) for rank in range(4)]
    assert shares == [(0, 3), (3, 3), (6, 2), (8, 2)]
