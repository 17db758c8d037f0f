"""The versioned-weights channel between a learner and whatever collects for it ahead of it
(collector processes, Ray env workers, Ray generation workers): the learner publishes a CPU copy
of its acting modules once per version (its updates so far in this launch), carried the way the
transport carries it (shared memory for collector processes, Ray's object store for Ray's
workers); a collector loads a version once however often it acts with it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

Handle = TypeVar("Handle")


@dataclass(frozen=True)
class ActingWeights:
    """What a collector acts with: tensors by module name (the algorithm's acting modules, as in
    its checkpoints), and their version (``CollectRequest.policy_version``)."""

    version: int
    tensors: dict[str, dict[str, torch.Tensor]]


def cpu_weights(version: int, modules: dict[str, torch.nn.Module]) -> ActingWeights:
    """A CPU copy of ``modules``' state as version ``version``."""
    tensors = {
        name: {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}
        for name, module in modules.items()
    }
    return ActingWeights(version, tensors)


class PublishedWeights(Generic[Handle]):
    """The learner's end of the channel: ``modules``' weights copied once per version and handed
    to ``carry``, which puts them where the transport's collectors read them and returns what
    they are sent (the weights themselves in shared memory, or a reference into Ray's object
    store). A learner's versions only grow within a launch, and its acting modules change only
    between versions."""

    def __init__(self, modules: dict[str, torch.nn.Module], carry: Callable[[ActingWeights], Handle]) -> None:
        self.modules = modules
        self.carry = carry
        self.version = -1
        """The newest version published (none yet)."""
        self.handle: Handle | None = None
        """Its handle (what a restarted collector is sent)."""

    def publish(self, version: int) -> tuple[Handle, bool]:
        """The handle of ``version``'s weights, and whether they were published now (a version
        new to the channel)."""
        new = version != self.version
        if new:
            self.handle, self.version = self.carry(cpu_weights(version, self.modules)), version
        assert self.handle is not None
        return self.handle, new
