"""One learner set-up for every runner: its networks made alike on every rank (rank 0's weights
broadcast), the frozen copies its update keeps (targets, a reference policy) made while the
networks are still whole, then everything sharded as ``train.sharding`` asks; and, afterwards,
the one answer to "is this learner sharded?" and to "give every rank the whole acting weights".

A runner names its networks (the one it acts and evaluates with first) and those to copy; an
algorithm's update only ever sees modules, whole or sharded, and knows nothing of ranks.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from distrl.comm import Comm
from distrl.comm.sharded import gathered, is_sharded


@dataclass(frozen=True)
class LearnerNetworks:
    """A runner's networks after ``set_up_learner``."""

    copies: list[nn.Module]
    """The frozen copies, in the order they were asked for."""
    acting: tuple[nn.Module, ...]
    """What acts, generates or evaluates: gathered whole by ``whole_weights``."""
    sharded: bool
    """Each rank holds shards of the networks, not all of them (decided here, once)."""

    @contextmanager
    def whole_weights(self) -> Iterator[None]:
        """Every rank holds the acting networks' whole weights for the block, so each may run as
        many forward passes as it needs (``comm.sharded.gathered``; every rank enters together).
        Nothing to do when not sharded."""
        with ExitStack() as stack:
            if self.sharded:
                for network in self.acting:
                    stack.enter_context(gathered(network))
            yield


def set_up_learner(
    comm: Comm,
    sharding: str,
    networks: Sequence[nn.Module],
    copied: Sequence[nn.Module] = (),
    copies_act: bool = False,
    param_dtype: torch.dtype | None = None,
    offload: bool = False,
) -> LearnerNetworks:
    """``networks`` set up alike on every rank: rank 0's weights broadcast, a frozen copy made of
    each of ``copied`` (a sharded network cannot be copied: its copy is made whole, then sharded
    alike, so that updating it from the network is local to each rank), then all of them sharded
    as ``sharding`` (``train.sharding``) asks.
    The first network is the one that acts, which ``LearnerNetworks.whole_weights`` gathers, with
    the copies when ``copies_act`` (GRPO's reference policy, scored in the same block).
    ``param_dtype`` and ``offload``: ``comm.sharded.shard_module_``'s."""
    for network in networks:
        comm.broadcast_parameters_(network)
    copies = [copy.deepcopy(network).requires_grad_(False) for network in copied]
    for network in (*networks, *copies):
        comm.shard_(network, sharding, param_dtype, offload)
    acting = (networks[0], *(copies if copies_act else ()))
    return LearnerNetworks(copies, acting, sharded=is_sharded(networks[0].parameters()))
