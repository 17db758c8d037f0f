"""Segments in shared memory, written by a collector process and read by its learner.

Handing a segment through a queue as tensors moves each tensor into a fresh shared-memory
block and passes its file descriptor, every segment: for small envs that costs more than the
stepping. Instead a collector process makes a few segment-shaped slots in shared memory once,
sends them to the learner once, then copies each segment into a free slot and sends only the
slot's index (and the segment's few numbers). The learner copies a slot out as it joins the
parts of a rank's segment and frees it; the process writes a slot only once it is free again.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from distrl.storage.segments import Segment


def _tensor_fields(segment: Segment) -> dict[str, torch.Tensor]:
    return {
        f.name: value
        for f in dataclasses.fields(segment)  # type: ignore[arg-type]
        if isinstance(value := getattr(segment, f.name), torch.Tensor)
    }


def shared_copy(segment: Segment) -> Segment:
    """``segment`` with each tensor copied into shared memory (one copy per tensor, however many
    fields hold it: integer frames are one tensor as ``obs`` and ``raw_obs``)."""
    copies: dict[int, torch.Tensor] = {}
    for tensor in _tensor_fields(segment).values():
        if id(tensor) not in copies:
            copies[id(tensor)] = tensor.clone().share_memory_()
    fields = {name: copies[id(tensor)] for name, tensor in _tensor_fields(segment).items()}
    return dataclasses.replace(segment, **fields)  # type: ignore[type-var]


class SegmentSlots:
    """``len(segments)`` segments in shared memory, by index: the same tensors in the process that
    writes them and in the one that reads them."""

    def __init__(self, segments: list[Segment]) -> None:
        self.segments = segments

    @classmethod
    def like(cls, segment: Segment, count: int) -> SegmentSlots:
        """``count`` slots shaped as ``segment``."""
        return cls([shared_copy(segment) for _ in range(count)])

    def write(self, index: int, segment: Segment) -> dict[str, Any]:
        """Copy ``segment``'s tensors into slot ``index``; its other fields (its version, flags),
        which go to the reader with the index."""
        slot = _tensor_fields(self.segments[index])
        written: set[int] = set()
        for name, tensor in _tensor_fields(segment).items():
            if id(slot[name]) not in written:  # a tensor held by two fields is copied once
                slot[name].copy_(tensor)
                written.add(id(slot[name]))
        return {
            f.name: getattr(segment, f.name)
            for f in dataclasses.fields(segment)  # type: ignore[arg-type]
            if f.name not in slot
        }

    def read(self, index: int, fields: dict[str, Any]) -> Segment:
        """Slot ``index`` with the fields ``write`` returned: its tensors are the slot's own, valid
        until the slot is written again."""
        return dataclasses.replace(self.segments[index], **fields)  # type: ignore[type-var]
