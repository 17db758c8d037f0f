"""Checkpoint tensors that no rank holds whole: a sharded learner's (``train.sharding``).

Every rank writes its own shards with torch's distributed checkpoint in safetensors files
(``HuggingFaceStorageWriter``: a file per rank, each tensor's offsets in the file's header;
tensors every rank holds whole are written once), into ``model/`` and ``optimizer/`` of the
checkpoint directory, beside the ``state.json`` and manifest of ``io.checkpoint``. Reading
fills given tensors: shards (each rank reads only the slices it holds, so a checkpoint resumes
on any number of ranks) or whole tensors (one process, or a replicated learner). A replicated
checkpoint's ``model.safetensors`` and ``optimizer.safetensors`` are read the same way, so a
sharded learner resumes from either.

torch's distributed checkpoint and DTensor are imported by the functions that read or write
shards, not here: importing them takes most of a second of every distrl process's start-up, and
only a sharded learner or checkpoint needs them.
"""

from __future__ import annotations

import contextlib
import math
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypeGuard

import torch

if TYPE_CHECKING:
    from torch.distributed.tensor import DTensor

MODEL_DIR = "model"
OPTIMIZER_DIR = "optimizer"


def is_dtensor(tensor: object) -> TypeGuard[DTensor]:
    """Whether ``tensor`` is a shard (a DTensor), without importing DTensor: no tensor is one
    unless its module is imported already."""
    dtensors = sys.modules.get("torch.distributed.tensor")
    return dtensors is not None and isinstance(tensor, dtensors.DTensor)


def is_sharded(tensors: dict[str, torch.Tensor]) -> bool:
    return any(is_dtensor(t) for t in tensors.values())


def full_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor of a shard (a collective: every rank calls it), or the tensor itself."""
    return tensor.full_tensor() if is_dtensor(tensor) else tensor


def shard_like(targets: dict[str, torch.Tensor], whole: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``whole`` tensors, each cut to the shard this rank holds of its target (no collective:
    every rank has them whole); those whose target is whole as they are."""
    from torch.distributed.tensor import distribute_tensor

    cut = dict(whole)
    for name, tensor in whole.items():
        target = targets.get(name)
        if is_dtensor(target):
            cut[name] = distribute_tensor(tensor, target.device_mesh, target.placements, src_data_rank=None)
    return cut


def write(directory: Path, tensors: dict[str, torch.Tensor]) -> None:
    """Collective: every rank writes its part of ``tensors`` as safetensors files in ``directory``."""
    import torch.distributed.checkpoint as dcp

    dcp.save(tensors, storage_writer=dcp.HuggingFaceStorageWriter(str(directory), save_distributed=True))


def shapes(directory: Path) -> dict[str, tuple[list[int], torch.dtype]]:
    """Each tensor's whole shape and dtype in the safetensors files of ``directory``."""
    import torch.distributed.checkpoint as dcp

    metadata = dcp.HuggingFaceStorageReader(str(directory)).read_metadata()
    return {
        name: (list(entry.size), entry.properties.dtype)
        for name, entry in metadata.state_dict_metadata.items()
        if isinstance(entry, dcp.TensorStorageMetadata)
    }


def missing_part(directory: Path, whole: dict[str, list[int]]) -> str | None:
    """The first tensor of ``whole`` (name: shape) that the shards in ``directory`` do not cover
    (a rank's file is not there), said as a phrase; None when every one is whole."""
    import torch.distributed.checkpoint as dcp

    metadata = dcp.HuggingFaceStorageReader(str(directory)).read_metadata().state_dict_metadata
    for name, shape in whole.items():
        entry = metadata.get(name)
        held = 0 if entry is None else sum(math.prod(chunk.sizes) for chunk in entry.chunks)
        if held != math.prod(shape):
            return f"{name} has {held} of its {math.prod(shape)} values"
    return None


def read_into(directory: Path, tensors: dict[str, torch.Tensor]) -> None:
    """Fill ``tensors`` (shards or whole tensors, as this process holds them) in place from the
    safetensors files of ``directory``; collective in a process group."""
    import torch.distributed.checkpoint as dcp

    with _without_group_warning():  # a sharded checkpoint resumed on one process
        dcp.load(tensors, storage_reader=dcp.HuggingFaceStorageReader(str(directory)))


def read_whole(directory: Path, prefix: str = "") -> dict[str, torch.Tensor]:
    """The whole tensors of ``directory`` whose names start with ``prefix`` (one process)."""
    import torch.distributed.checkpoint as dcp

    wanted = {
        name: torch.empty(size, dtype=dtype)
        for name, (size, dtype) in shapes(directory).items()
        if name.startswith(prefix)
    }
    with _without_group_warning():
        dcp.load(wanted, storage_reader=dcp.HuggingFaceStorageReader(str(directory)), no_dist=True)
    return wanted


@contextlib.contextmanager
def _without_group_warning() -> Iterator[None]:
    """Torch warns when it reads without a process group, which is what one process is for."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "torch.distributed is disabled")
        yield
