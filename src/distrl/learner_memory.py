"""What each rank's learner holds between its passes, by ``train.sharding``: float32 weights,
their gradients and Adam's two moments, whole or a shard of them; frozen copies (a target
network, GRPO's KL reference), sharded alike; and the whole weights a sharded learner gathers
while it acts or generates (``comm.sharded.gathered``), in the dtype it gathers them in."""

from __future__ import annotations

import math
from dataclasses import dataclass

from distrl.errors import UserError

FLOAT32 = 4


@dataclass(frozen=True)
class LearnerParameters:
    """A learner's parameters, counted without making them (``distrl config``)."""

    trained: int
    """Stepped by the optimiser: weights, gradients and Adam's two moments each."""
    frozen: int = 0
    """Held beside them, weights only: target networks, a KL reference."""
    gathered_bytes: int = FLOAT32
    """A weight's bytes when a sharded learner gathers the policy whole (2 under bf16 mixed
    precision)."""
    gathered_frozen: bool = False
    """Its frozen copies are gathered whole with the policy (GRPO's reference, for the
    log-probability passes), not only its trained weights."""


def shard_group(sharding: str, ranks: int, nodes: int) -> int:
    """How many ranks share one copy of the weights: 1 (replicated), all of them (FSDP), those
    of a node (HSDP)."""
    return {"none": 1, "fsdp": ranks, "hsdp": max(ranks // nodes, 1)}[sharding]


def learner_bytes(
    parameters: LearnerParameters, sharding: str, ranks: int, nodes: int, held_gradients: bool = False
) -> dict[str, int]:
    """Bytes one rank holds (float32 and Adam), by what they are; ``held_gradients``:
    ``train.hold_unsharded_gradients``."""
    group = shard_group(sharding, ranks, nodes)
    held = math.ceil(parameters.trained / group) * FLOAT32
    figures = {"weights": held, "gradients": held, "optimizer state (Adam)": 2 * held}
    if parameters.frozen:
        figures["frozen copies (targets, reference)"] = math.ceil(parameters.frozen / group) * FLOAT32
    if held_gradients:
        figures["whole gradients held over micro-batches"] = parameters.trained * FLOAT32
    if sharding != "none":
        gathered = parameters.trained + (parameters.frozen if parameters.gathered_frozen else 0)
        figures["whole weights while generating or acting (gathered)"] = gathered * parameters.gathered_bytes
    return figures


def check_sharding_layout(sharding: str, ranks: int, ranks_per_node: int) -> None:
    """HSDP replicates across nodes and shards within each: it needs 2 or more nodes of equal
    size. ``distrl config --ranks`` and training refuse it alike."""
    nodes, remainder = divmod(ranks, ranks_per_node)
    if sharding == "hsdp" and (nodes < 2 or remainder):
        raise UserError(
            f"train.sharding=hsdp replicates across nodes and shards within each, so it needs 2 or "
            f"more nodes of equal size; this run has {ranks} rank(s), {ranks_per_node} per node: use "
            "train.sharding=fsdp",
            code="sharding-hsdp-one-node",
        )


def unsharded_note(sharding: str, ranks: int) -> str | None:
    """The line saying a sharding setting does nothing on one rank (nothing to shard over), or None."""
    if sharding == "none" or ranks > 1:
        return None
    return (
        f"train.sharding={sharding} on one rank: there is nothing to shard over, so the learner holds "
        "its whole weights (as train.sharding=none); sharding applies from 2 ranks"
    )
