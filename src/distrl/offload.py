"""Optimiser state offloaded to the CPU (``train.optimizer_offload``), one of the memory options:
Adam's two moments per weight are twice the model, and on a GPU they need not be there.

``OffloadedOptimizer`` keeps a float32 copy of every weight in CPU memory and runs the optimiser
on those copies: each step copies the gradients (already averaged over ranks) to the CPU, steps
there, and copies the new weights back. The GPU holds weights and gradients only. It quacks as
the optimiser it wraps for the rest of distrl (learning-rate schedules set ``param_groups``;
checkpoints save its ``state_dict``, laid out as the wrapped optimiser's, so a run may resume
with the option on or off).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn


class OffloadedOptimizer:
    def __init__(
        self, params: Sequence[nn.Parameter], make: Callable[[list[torch.Tensor]], torch.optim.Optimizer]
    ) -> None:
        """``make``: builds the optimiser over the CPU copies it is given."""
        self.params = list(params)
        self.copies = [p.detach().to("cpu", torch.float32, copy=True) for p in self.params]
        for copy in self.copies:
            copy.grad = torch.zeros_like(copy)
        self.inner = make(self.copies)

    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.inner.param_groups

    def step(self) -> None:
        for param, copy in zip(self.params, self.copies, strict=True):
            copy.grad.copy_(param.grad)
        self.inner.step()
        with torch.no_grad():
            for param, copy in zip(self.params, self.copies, strict=True):
                param.copy_(copy)

    def state_dict(self) -> dict[str, Any]:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The optimiser's state, and the CPU copies refreshed from the (restored) weights."""
        self.inner.load_state_dict(state)
        with torch.no_grad():
            for param, copy in zip(self.params, self.copies, strict=True):
                copy.copy_(param)


def optimizer_for(
    params: Sequence[nn.Parameter], make: Callable[[list], torch.optim.Optimizer], offload: bool
) -> torch.optim.Optimizer | OffloadedOptimizer:
    """``make(params)``, or with ``offload`` (``train.optimizer_offload``) for CUDA weights, the same
    optimiser stepping CPU copies of them (on other devices the state is in host memory already)."""
    if offload and params[0].device.type == "cuda":
        return OffloadedOptimizer(params, make)
    return make(list(params))
