"""The one place seeds are derived. Everything keys on the global rank, never the local rank
(which repeats on every node)."""

from __future__ import annotations

import numpy as np
import torch

from distrl.sharding import EnvShard


def rank_seed(seed: int, rank: int) -> int:
    """Independent 32-bit seed for a rank's torch RNG (initial weights, minibatch shuffling)."""
    return int(np.random.SeedSequence([seed, rank]).generate_state(1)[0])


def env_seeds(seed: int, shard: EnvShard, start_index: int = 0) -> list[int]:
    """Distinct seeds for every env of every rank: global env index g gets ``seed + g``.

    ``start_index`` shifts the block (by multiples of the global env count) so that a resumed
    run's fresh episodes do not replay the first launch's.
    """
    first = seed + start_index * shard.global_count + shard.first
    return [first + i for i in range(shard.count)]


def completion_seed(seed: int, step: int, prompt_index: int) -> int:
    """The seed of the sampling noise of one prompt's completions (GRPO): keyed on the update and
    the prompt's global index, so any number of ranks samples the same ones."""
    return int(np.random.SeedSequence([seed, 1, step, prompt_index]).generate_state(1)[0])


def draw_seed(seed: int, draw: int) -> int:
    """The sampling noise's seed of a prompt's ``draw``-th completion (``seed``: the prompt's)."""
    return int(np.random.SeedSequence([seed, 3, draw]).generate_state(1)[0])


def minibatch_seed(seed: int, step: int, epoch: int) -> int:
    """The seed of an update epoch's shuffle of the global batch (the same on every rank)."""
    return int(np.random.SeedSequence([seed, 2, step, epoch]).generate_state(1)[0])


def seed_torch(seed: int, rank: int) -> None:
    torch.manual_seed(rank_seed(seed, rank))
