"""What each rank's learner holds between its passes, by ``train.sharding``: float32 weights,
their gradients and Adam's two moments, whole or a shard of them; and the whole weights a
sharded learner gathers while it acts or generates (``comm.sharded.gathered``)."""

from __future__ import annotations

import math

FLOAT32 = 4


def shard_group(sharding: str, ranks: int, nodes: int) -> int:
    """How many ranks share one copy of the weights: 1 (replicated), all of them (FSDP), those
    of a node (HSDP)."""
    return {"none": 1, "fsdp": ranks, "hsdp": max(ranks // nodes, 1)}[sharding]


def learner_bytes(parameters: int, sharding: str, ranks: int, nodes: int) -> dict[str, int]:
    """Bytes one rank holds for a model of ``parameters`` (float32 and Adam), by what they are."""
    held = math.ceil(parameters / shard_group(sharding, ranks, nodes)) * FLOAT32
    figures = {"weights": held, "gradients": held, "optimizer state (Adam)": 2 * held}
    if sharding != "none":
        figures["whole weights while generating or acting (gathered)"] = parameters * FLOAT32
    return figures
