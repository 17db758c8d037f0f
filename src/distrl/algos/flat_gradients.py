"""All of a network's gradients in one flat buffer.

Every parameter's ``.grad`` is a view into the buffer, so zeroing, the cross-rank sum and the
global norm are one tensor operation each instead of one per parameter, and the sum needs no
copy into and out of a bucket (the idea of DDP's ``gradient_as_bucket_view``). Autograd
accumulates into an existing ``.grad`` in place, which keeps the views intact as long as nothing
sets them to ``None`` (``optimizer.zero_grad()`` would: use ``zero_()``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch
from torch import nn

from distrl.comm.sharded import (
    ClippedSteps,
    GradientSync,
    MicroBatchLoss,
    ShardedGradients,
    is_sharded,
    resharded_,
)
from distrl.timing import PhaseClock


class FlatGradients(ClippedSteps):
    def __init__(self, params: Sequence[nn.Parameter], clock: PhaseClock | None = None) -> None:
        self.clock = clock or PhaseClock()
        """Times the backward pass and the optimiser step (the loop's clock)."""
        first = params[0]
        if any(p.dtype != first.dtype or p.device != first.device for p in params):
            raise ValueError("flat gradients need all parameters on one device with one dtype")
        self.trained = [p for p in params if p.requires_grad]
        """Backward passes compute these gradients only: a loss that reaches another network's
        parameters (SAC's actor loss goes through the critics) spends nothing on theirs."""
        numel = sum(p.numel() for p in params)
        # One slot past the gradients carries the sample weight through the same sum.
        self.bucket = torch.zeros(numel + 1, dtype=first.dtype, device=first.device)
        self.flat = self.bucket[:-1]
        offset = 0
        for p in params:
            p.grad = self.flat[offset : offset + p.numel()].view_as(p)
            offset += p.numel()

    def zero_(self) -> None:
        self.bucket.zero_()

    def average_(self, sync: GradientSync, weight: float) -> None:
        """Turn this rank's gradient, a mean over ``weight`` samples, into the mean over all
        ranks' samples: sum (weight x gradient, weight) in one collective and divide. Exact also
        when ranks hold different numbers of samples (a straggler stopped early)."""
        self.flat.mul_(weight)
        self.bucket[-1] = weight
        sync(self.bucket)
        self.flat.div_(self.bucket[-1])

    def step(
        self,
        loss: torch.Tensor | None,
        optimizer: torch.optim.Optimizer,
        sync: GradientSync | None,
        weight: float,
        max_grad_norm: float,
    ) -> float:
        """One synchronised optimiser step on ``loss`` (a mean over ``weight`` local samples):
        backward, cross-rank sample-weighted average, global-norm clip, step. Returns the norm,
        or NaN when it is not finite: the norm is taken after the sync, so a NaN/inf on any rank
        (it spreads through the average) makes every rank skip the same step. ``loss`` None: this
        rank has no samples for the step and joins the sync with weight 0."""
        self.zero_()
        if loss is not None:
            with self.clock("backward"):
                loss.backward(inputs=self.trained)
        if sync is not None:
            self.average_(sync, weight)  # the communicator times the sum itself
        return self._clip_and_step(optimizer, max_grad_norm)

    def accumulated_step(
        self,
        losses: Sequence[MicroBatchLoss],
        optimizer: torch.optim.Optimizer,
        sync: GradientSync | None,
        max_grad_norm: float,
    ) -> float:
        """``step`` over micro-batches (gradient accumulation): each ``(loss, weight)``, a mean
        over ``weight`` samples or tokens, is backpropagated as the sum ``loss x weight``, one at
        a time (each computed only when called, so one micro-batch's activations are alive at
        once); the sum over micro-batches and ranks is then divided by the total weight. So k
        micro-batches give the gradient of the one batch they make up."""
        self.zero_()
        for micro_batch_loss in losses:
            loss, weight = micro_batch_loss()
            with self.clock("backward"):
                (loss * weight).backward(inputs=self.trained)
            self.bucket[-1] += weight
        if sync is not None:
            sync(self.bucket)
        if self.bucket[-1] > 0:
            self.flat.div_(self.bucket[-1])
        return self._clip_and_step(optimizer, max_grad_norm)

    def clip_norm_(self, max_norm: float) -> float:
        """Scale the gradient to at most ``max_norm`` (L2 over all parameters); return the norm
        before clipping (inf or NaN when a gradient is not finite, leaving it unscaled)."""
        norm = float(torch.linalg.vector_norm(self.flat))
        if norm > max_norm and norm != float("inf"):
            self.flat.mul_(max_norm / (norm + 1e-6))
        return norm


Gradients = FlatGradients | ShardedGradients


def gradients_for(
    params: Sequence[nn.Parameter], clock: PhaseClock | None = None, held_in: nn.Module | None = None
) -> Gradients:
    """The gradients of ``params``: one flat buffer, or FSDP's shards when the learner is sharded
    (``train.sharding``); both take the same steps. ``held_in``: the sharded module whose
    gradients are held whole until the last micro-batch (``ShardedGradients``)."""
    if is_sharded(params):
        return ShardedGradients(params, params[0].device_mesh.size(), clock, held_in)
    return FlatGradients(params, clock)


def set_learning_rate(optimizers: Iterable[torch.optim.Optimizer], lr: float) -> None:
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            group["lr"] = lr


@torch.no_grad()
def polyak_update_(target: nn.Module, online: nn.Module, tau: float) -> None:
    """Move ``target``'s parameters ``tau`` of the way towards ``online``'s (1: copy them);
    sharded alike, each rank moves its own shards."""
    resharded_(target, online)
    for target_param, online_param in zip(target.parameters(), online.parameters(), strict=True):
        target_param.lerp_(online_param, tau)


class SeparateNetworks:
    """Networks trained on losses of their own (SAC's and IQL's critics, actor, ...): each its own
    flat gradients and Adam, one synchronised step per loss."""

    def __init__(
        self,
        networks: dict[str, nn.Module],
        lr: float,
        adam_eps: float,
        max_grad_norm: float | None,
        sync: GradientSync | None,
        clock: PhaseClock,
    ) -> None:
        self.sync = sync
        self.max_grad_norm = math.inf if max_grad_norm is None else max_grad_norm
        self.grads: dict[str, Gradients] = {}
        self.optimizers: dict[str, torch.optim.Optimizer] = {}
        for name, network in networks.items():
            params = list(network.parameters())
            self.grads[name] = gradients_for(params, clock)
            # The fused kernel is several times faster than the per-tensor loop for small networks.
            self.optimizers[name] = torch.optim.Adam(params, lr=lr, eps=adam_eps, fused=True)

    def set_learning_rate(self, lr: float) -> None:
        set_learning_rate(self.optimizers.values(), lr)

    def step(self, network: str, loss: torch.Tensor | None, rows: int) -> float:
        """``FlatGradients.step`` of ``network`` on ``loss``, a mean over ``rows`` local samples
        (None: this rank has none); the gradient norm, NaN when not finite."""
        return self.grads[network].step(loss, self.optimizers[network], self.sync, rows, self.max_grad_norm)
