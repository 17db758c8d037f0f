"""Segments in shared memory, written by a collector process and read by its learner.

Handing a segment through a queue as tensors moves each tensor into a fresh shared-memory
block and passes its file descriptor, every segment: for small envs that costs more than the
stepping. Instead a collector process makes a few segment-shaped slots in shared memory once,
sends them to the learner once, then copies each segment into a free slot and sends only the
slot's index (and the segment's few numbers). The learner copies a slot out as it joins the
parts of a rank's segment and frees it; the process writes a slot only once it is free again,
or, when its queue may drop the oldest (``collect.queue_full: drop_oldest``), writes over the
oldest segment the learner has not begun to read (``SlotStates`` keeps who may touch which slot).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
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


FREE, READING, WRITING = 0, -1, -2
"""A slot's state besides holding a queued segment, which is the segment's number (1, 2, ...)."""


class SlotStates:
    """Which of a collector process's slots is free, being written, being read, or holds which
    queued segment (by the segment's number in the process): shared by the process and its
    learner under one lock, so that a slot the learner has begun to read is never written over.
    ``wait(gone)`` takes the lock, calling ``gone`` (which raises when the other side has ended)
    each time it waits ``poll_s`` in vain: a side killed holding it never hangs the other."""

    def __init__(self, count: int, lock: Any, poll_s: float) -> None:
        self.states = torch.full((count,), FREE, dtype=torch.int64).share_memory_()
        self.lock = lock
        self.poll_s = poll_s

    @contextlib.contextmanager
    def locked(self, gone: Callable[[], None]) -> Iterator[torch.Tensor]:
        while not self.lock.acquire(timeout=self.poll_s):
            gone()
        try:
            yield self.states
        finally:
            self.lock.release()

    def slot_to_write(self, drop_oldest: bool, gone: Callable[[], None]) -> int:
        """The process's next slot to write, marked as being written: a free one, else (with
        ``drop_oldest``) the one holding the oldest queued segment, which is lost (the learner
        sees the gap in the numbers). A process that waits for room in its queue before it
        writes again always finds a free slot (its queue, the slot the learner reads and the one
        it writes are fewer than its slots)."""
        with self.locked(gone) as states:
            free = (states == FREE).nonzero()
            if len(free):
                slot = int(free[0])
            elif drop_oldest and bool((queued := states > 0).any()):
                slot = int(torch.where(queued, states, states.max() + 1).argmin())
            else:
                raise RuntimeError(f"no slot free to write: {states.tolist()}")
            states[slot] = WRITING
            return slot

    def written(self, slot: int, number: int, gone: Callable[[], None]) -> None:
        """Slot ``slot`` now holds the process's segment ``number`` (from 1), queued."""
        with self.locked(gone) as states:
            states[slot] = number

    def claim(self, slot: int, number: int, gone: Callable[[], None]) -> bool:
        """The learner begins to read segment ``number`` in ``slot``: False when the process has
        written over it since it was queued (its message is stale)."""
        with self.locked(gone) as states:
            if int(states[slot]) != number:
                return False
            states[slot] = READING
            return True

    def queued(self, gone: Callable[[], None]) -> int:
        """Segments written and not yet taken by the learner."""
        with self.locked(gone) as states:
            return int((states > 0).sum())

    def free(self, slot: int, gone: Callable[[], None]) -> None:
        with self.locked(gone) as states:
            states[slot] = FREE
