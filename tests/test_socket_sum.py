"""Sums over distrl's own sockets: correct, bit-identical, larger than socket buffers, and a
closed peer is reported at once instead of hanging."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
import torch

from distrl.comm import Comm
from distrl.errors import PeerFailure
from tests.distributed import run_ranks

# 4M floats (16 MiB) is far larger than the kernel's socket buffers: a send-all-then-receive
# exchange would deadlock with both peers sending.
LARGE = 4_000_000


def _large_sum_worker(comm: Comm, out: Path) -> None:
    assert comm.sum_algorithm == "socket", "power-of-two gloo groups sum over distrl's sockets"
    values = torch.randn(LARGE, generator=torch.Generator().manual_seed(comm.rank))
    for _ in range(3):  # the receive buffer is reused between calls
        result = values.clone()
        comm.allreduce_sum_(result)
    np.save(out / f"rank{comm.rank}.npy", result.numpy())


# 2 ranks on the 2-core test machine busy-poll while they wait (train.sync_spin_ms unset: every
# rank has a core); 4 ranks sleep in select: both ways of waiting are covered.
@pytest.mark.parametrize("world_size", [2, 4])
def test_large_sum_is_correct_and_bit_identical(tmp_path: Path, world_size: int) -> None:
    run_ranks(_large_sum_worker, world_size, tmp_path)
    expected = sum(
        torch.randn(LARGE, generator=torch.Generator().manual_seed(r)).double() for r in range(world_size)
    ).numpy()
    results = [np.load(tmp_path / f"rank{r}.npy") for r in range(world_size)]
    for result in results[1:]:
        np.testing.assert_array_equal(result, results[0])
    np.testing.assert_allclose(results[0], expected, rtol=1e-5, atol=1e-4)


def _peer_leaves_worker(comm: Comm, out: Path) -> None:
    if comm.rank == 1:
        comm.close()  # closes its sockets and leaves
        return
    time.sleep(1.0)
    start = time.monotonic()
    with pytest.raises(PeerFailure, match="allreduce_sum_ failed"):
        comm.allreduce_sum_(torch.ones(10))
    (out / "elapsed").write_text(str(time.monotonic() - start))


def test_closed_peer_fails_the_sum_at_once(tmp_path: Path) -> None:
    run_ranks(_peer_leaves_worker, 2, tmp_path)
    # Far below the 60 s timeout the ranks were given: the closed connection is seen directly.
    assert float((tmp_path / "elapsed").read_text()) < 5.0
