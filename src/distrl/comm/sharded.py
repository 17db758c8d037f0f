"""Sharded learners: each rank holds a shard of the weights, their gradients and the optimiser's
state (FSDP2's ``fully_shard``), and distrl's gradient weighting survives it.

FSDP2 all-gathers a block's weights for its forward and backward passes and reduce-scatters its
gradients, averaged over ranks, as the backward pass leaves the block. distrl wants each rank's
gradient weighted by its share of the samples instead (ranks may hold different numbers, or
none): a rank backpropagates its loss times its sample weight, so FSDP's average is
``sum_r w_r g_r / world``, and one sum of the weights turns it into ``sum_r w_r g_r / sum_r w_r``,
the gradient of the mean over all samples. Every rank must run the same forward and backward
passes (each is a collective): a rank without samples runs them on an empty batch, at weight 0.

Acting, generating and evaluating take each rank a different number of forward passes, so they
run on weights gathered once (``gathered``), not through FSDP's per-pass collectives; or, for
GRPO's generation on the shards, with every rank stepping until all ranks are done
(``models.generate``'s ``any_running``).

FSDP is imported by ``shard_module_``, not here: it imports DTensor, most of a second of every
distrl process's start-up, and only a sharded learner needs it.
"""

from __future__ import annotations

import math
import sys
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
from torch import nn

from distrl.io.shards import full_tensor, is_dtensor
from distrl.timing import PhaseClock

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import FSDPModule

GradientSync = Callable[[torch.Tensor], None]
"""Sums a tensor over all ranks in place (``algos.flat_gradients.GradientSync``)."""
MicroBatchLoss = Callable[[], tuple[torch.Tensor, float]]
"""Computes one micro-batch's loss (a mean over its samples or tokens) and that count, when
called: gradient accumulation computes each only when its backward pass is next."""


def shard_module_(
    module: nn.Module, mesh: DeviceMesh, param_dtype: torch.dtype | None = None, offload: bool = False
) -> None:
    """Shard ``module`` over ``mesh`` (one dimension: FSDP; two, replicate x shard: HSDP). Each
    element of an ``nn.ModuleList`` (a transformer's layers) is a unit of its own, gathered only
    while it computes; the rest of the module is one unit, gathered around ``forward`` and the
    methods the module names in ``forward_methods``.

    ``param_dtype`` (bfloat16 for ``train.mixed_precision``): the shards, their gradients and the
    optimiser's state stay float32; the weights are gathered and computed with in this dtype and
    the gradients reduced in float32. ``offload``: the shards, gradients and optimiser state live
    in CPU memory and each unit's are copied to the device to be gathered (a CUDA learner's
    ``train.optimizer_offload``)."""
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        MixedPrecisionPolicy,
        OffloadPolicy,
        fully_shard,
        register_fsdp_forward_method,
    )

    # Said once per forward pass of a module whose outputs are views; distrl changes none in place.
    warnings.filterwarnings("ignore", "FSDP2-wrapped module .* returned a view tensor")
    options = {
        "mesh": mesh,
        "mp_policy": MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32),
        "offload_policy": CPUOffloadPolicy() if offload else OffloadPolicy(),
    }
    blocks = [block for child in module.modules() if isinstance(child, nn.ModuleList) for block in child]
    for block in reversed(blocks):  # inner units first
        fully_shard(block, **options)
    fully_shard(module, **options)
    for method in getattr(module, "forward_methods", ()):
        register_fsdp_forward_method(module, method)


def _fsdp_units(module: nn.Module) -> list[FSDPModule]:
    """``module``'s FSDP units, itself included if it is one, without importing FSDP: no module
    is sharded unless FSDP is imported already."""
    fsdp = sys.modules.get("torch.distributed.fsdp")
    if fsdp is None:
        return []
    return [unit for unit in module.modules() if isinstance(unit, fsdp.FSDPModule)]


def resharded_(*modules: nn.Module) -> None:
    """Free whatever whole weights ``modules``' units still hold, so that their parameters are
    the shards again (FSDP keeps the root unit's after a forward pass, for the backward pass a
    frozen copy, a target network, never runs)."""
    for module in modules:
        for unit in _fsdp_units(module):
            unit.reshard()


def is_sharded(params: Iterable[torch.Tensor]) -> bool:
    return any(is_dtensor(p) for p in params)


@contextmanager
def gathered(module: nn.Module) -> Iterator[None]:
    """Hold ``module``'s whole weights on every rank for the block: forward passes inside run no
    collective, so ranks may run different numbers of them. Entering and leaving are collectives
    (every rank enters). A module that is not sharded is left as it is."""
    units = _fsdp_units(module)
    if not units:
        yield
        return
    module.set_reshard_after_forward(False)
    for unit in units:  # each unit's own weights: a block's are not the module's
        unit.unshard()
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
        module.set_reshard_after_forward(True)


class ClippedSteps:
    """The end of every optimiser step, flat or sharded: clip the gradient's global norm, then
    step, or skip the step when the norm is not finite (on every rank alike: it is global)."""

    clock: PhaseClock
    every_pass_is_collective: bool = False
    """Each forward and backward pass is a collective (sharded weights): a rank without samples
    still runs them, on an empty batch at weight 0."""

    def clip_norm_(self, max_norm: float) -> float:
        """Scale the gradient to at most ``max_norm``; return its norm before clipping."""
        raise NotImplementedError

    def _clip_and_step(self, optimizer: torch.optim.Optimizer, max_grad_norm: float) -> float:
        with self.clock("optimizer"):
            norm = self.clip_norm_(max_grad_norm)
            if not math.isfinite(norm):
                return math.nan
            optimizer.step()
        return norm


class ShardedGradients(ClippedSteps):
    """``FlatGradients``' steps for parameters sharded by FSDP2, with the same weighting: the
    sample-weighted mean over ranks, clipped by the norm over all shards."""

    every_pass_is_collective = True

    def __init__(
        self,
        params: Sequence[nn.Parameter],
        world_size: int,
        clock: PhaseClock | None = None,
        held_in: nn.Module | None = None,
    ) -> None:
        """``held_in``: the sharded module (``train.hold_unsharded_gradients``) whose gradients
        accumulate whole on every rank over a step's micro-batches and are reduce-scattered once,
        after the last, instead of after each: one reduce-scatter a step instead of one per
        micro-batch, for a whole float32 copy of the gradients held on each rank."""
        self.clock = clock or PhaseClock()
        self.params = [p for p in params if p.requires_grad]
        self.world_size = world_size
        """FSDP divides the sum of the ranks' gradients by this."""
        self.held_in = held_in

    def step(
        self,
        loss: torch.Tensor | None,
        optimizer: torch.optim.Optimizer,
        sync: GradientSync | None,
        weight: float,
        max_grad_norm: float,
    ) -> float:
        """``FlatGradients.step``: ``loss``, a mean over ``weight`` local samples (0: an empty
        batch's loss, still computed, for the collectives of its passes)."""
        if loss is None:
            raise ValueError("a sharded learner runs every pass: give the loss of an empty batch, weight 0")
        return self.accumulated_step([lambda: (loss, weight)], optimizer, sync, max_grad_norm)

    def accumulated_step(
        self,
        losses: Sequence[MicroBatchLoss],
        optimizer: torch.optim.Optimizer,
        sync: GradientSync | None,
        max_grad_norm: float,
    ) -> float:
        """``FlatGradients.accumulated_step``; every rank must give as many micro-batches (FSDP
        reduce-scatters each one's gradients as its backward pass ends, or only the last's with
        ``held_in``)."""
        for p in self.params:
            p.grad = None
        local_weight = 0.0
        for index, micro_batch_loss in enumerate(losses):
            if self.held_in is not None:
                self.held_in.set_requires_gradient_sync(index == len(losses) - 1)
            loss, weight = micro_batch_loss()
            with self.clock("backward"):
                # No ``inputs=``: the graph holds the gathered weights, not these shards.
                (loss * weight).backward()
            local_weight += weight
        total = torch.tensor([local_weight], dtype=torch.float64)
        if sync is not None:
            sync(total)
        grads = [p.grad.to_local() for p in self.params if p.grad is not None]
        if total.item() > 0:
            torch._foreach_mul_(grads, self.world_size / total.item())
        return self._clip_and_step(optimizer, max_grad_norm)

    def clip_norm_(self, max_norm: float) -> float:
        """``FlatGradients.clip_norm_`` over every rank's shards (one all-reduce of the squares)."""
        grads = [p.grad for p in self.params if p.grad is not None]
        norm = float(full_tensor(torch.nn.utils.get_total_norm(grads)))
        if norm > max_norm and norm != float("inf"):
            torch._foreach_mul_([g.to_local() for g in grads], max_norm / (norm + 1e-6))
        return norm
