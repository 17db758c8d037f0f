"""Sequence packing: sequences of mixed lengths laid one after another in rows of a fixed token
budget, instead of one a row padded to the longest. A pass then computes on about as many
positions as there are tokens; attention stays within each sequence (the models'
``packed_positions``).

Rows are filled first-fit in order of decreasing length (at most 11/9 of the fewest rows that
could hold them, plus one: Johnson's bound).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PackedSequences:
    tokens: torch.Tensor
    """``[rows, budget]``: the sequences one after another; the rest of a row is filler, each
    token a sequence of its own (position 0: within any model's context)."""
    positions: torch.Tensor
    """``[rows, budget]``: each token's position within its sequence (0 where one begins)."""
    starts: torch.Tensor
    """``[sequences]``: where each sequence begins, as an index into the flattened rows."""


def pack_sequences(
    sequences: list[torch.Tensor], budget: int, filler: int, device: torch.device
) -> PackedSequences:
    """Pack 1-D token tensors into rows of ``budget`` tokens (at least the longest sequence's
    length; at least one row, even for no sequences), on ``device``."""
    width = max([budget, *(len(s) for s in sequences)])
    room: list[int] = []  # each row's free tokens
    placed = [(0, 0)] * len(sequences)  # (row, offset) of each sequence
    for index in sorted(range(len(sequences)), key=lambda i: -len(sequences[i])):
        length = len(sequences[index])
        row = next((r for r, free in enumerate(room) if free >= length), len(room))
        if row == len(room):
            room.append(width)
        placed[index] = (row, width - room[row])
        room[row] -= length
    rows = max(len(room), 1)
    tokens = torch.full((rows, width), filler, dtype=torch.long, device=device)
    positions = torch.zeros((rows, width), dtype=torch.long, device=device)
    for sequence, (row, offset) in zip(sequences, placed, strict=True):
        tokens[row, offset : offset + len(sequence)] = sequence
        positions[row, offset : offset + len(sequence)] = torch.arange(len(sequence), device=device)
    starts = torch.tensor([row * width + offset for row, offset in placed], dtype=torch.long, device=device)
    return PackedSequences(tokens, positions, starts)
