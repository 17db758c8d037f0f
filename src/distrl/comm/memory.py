"""What each rank's learner holds between its passes, by ``train.sharding``: float32 weights,
their gradients and Adam's two moments, whole or a shard of them; and the whole weights a
sharded learner gathers while it acts or generates (``comm.sharded.gathered``), in the dtype it
gathers them in."""

from __future__ import annotations

import math

FLOAT32 = 4


def shard_group(sharding: str, ranks: int, nodes: int) -> int:
    """How many ranks share one copy of the weights: 1 (replicated), all of them (FSDP), those
    of a node (HSDP)."""
    return {"none": 1, "fsdp": ranks, "hsdp": max(ranks // nodes, 1)}[sharding]


def learner_bytes(
    parameters: int,
    sharding: str,
    ranks: int,
    nodes: int,
    gathered_dtype_bytes: int = FLOAT32,
    held_gradients: bool = False,
) -> dict[str, int]:
    """Bytes one rank holds for a model of ``parameters`` (float32 and Adam), by what they are.
    ``gathered_dtype_bytes``: of a weight gathered whole (2 under bf16 mixed precision);
    ``held_gradients``: ``train.hold_unsharded_gradients``."""
    held = math.ceil(parameters / shard_group(sharding, ranks, nodes)) * FLOAT32
    figures = {"weights": held, "gradients": held, "optimizer state (Adam)": 2 * held}
    if held_gradients:
        figures["whole gradients held over micro-batches"] = parameters * FLOAT32
    if sharding != "none":
        figures["whole weights while generating or acting (gathered)"] = parameters * gathered_dtype_bytes
    return figures
