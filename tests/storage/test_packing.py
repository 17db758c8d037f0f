"""Sequence packing: every sequence whole in one row, rows first-fit by decreasing length within
the budget, positions restarting at each sequence."""

from __future__ import annotations

import torch

from distrl.storage.packing import pack_sequences

CPU = torch.device("cpu")


def test_sequences_are_packed_whole_first_fit_by_decreasing_length() -> None:
    lengths = [3, 7, 2, 5, 1, 4]
    sequences = [torch.arange(10 * i, 10 * i + n) for i, n in enumerate(lengths)]
    packed = pack_sequences(sequences, budget=8, filler=-1, device=CPU)
    # Decreasing: 7 -> row 0 (1 left), 5 -> row 1 (3 left), 4 -> row 2, 3 -> row 1, 2 -> row 2, 1 -> row 0.
    assert packed.tokens.shape == (3, 8)
    flat, positions = packed.tokens.reshape(-1), packed.positions.reshape(-1)
    for sequence, start in zip(sequences, packed.starts.tolist(), strict=True):
        assert torch.equal(flat[start : start + len(sequence)], sequence)
        assert positions[start : start + len(sequence)].tolist() == list(range(len(sequence)))
    assert [start // 8 for start in packed.starts.tolist()] == [1, 0, 2, 1, 0, 2]
    assert (packed.tokens == -1).sum() == 3 * 8 - sum(lengths)
    assert packed.positions[1].tolist() == [0, 1, 2, 3, 4, 0, 1, 2]  # 5 tokens, then 3
    assert packed.positions[2].tolist() == [0, 1, 2, 3, 0, 1, 0, 0]  # 4, 2, then filler


def test_a_sequence_longer_than_the_budget_widens_the_rows_and_none_gives_one_row() -> None:
    packed = pack_sequences([torch.arange(5), torch.arange(2)], budget=3, filler=0, device=CPU)
    assert packed.tokens.shape == (1, 7) or packed.tokens.shape == (2, 5)
    assert packed.tokens.shape[1] == 5
    empty = pack_sequences([], budget=4, filler=0, device=CPU)
    assert empty.tokens.shape == (1, 4) and len(empty.starts) == 0
