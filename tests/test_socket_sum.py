"""Sums over distrl's own sockets: correct, bit-identical, larger than socket buffers, and a
closed peer is reported at once instead of hanging."""

from __future__ import annotations

import os
import resource
import socket
import struct
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

from distrl.comm import TorchComm
from distrl.errors import CollectiveMismatch, PeerFailure
from distrl.socket_sum import TOKEN_BYTES, SocketSum, accept_partners
from tests.distributed import run_ranks

# 4M floats (16 MiB) is far larger than the kernel's socket buffers: a send-all-then-receive
# exchange would deadlock with both peers sending.
LARGE = 4_000_000


def _large_sum_worker(comm: TorchComm, out: Path) -> None:
    assert comm.sum_algorithm == "socket", "power-of-two gloo groups sum over distrl's sockets"
    values = torch.randn(LARGE, generator=torch.Generator().manual_seed(comm.rank))
    for _ in range(3):  # the receive buffer is reused between calls
        result = values.clone()
        comm.allreduce_sum_(result)
    np.save(out / f"rank{comm.rank}.npy", result.numpy())


# 2 ranks on the 2-core test machine busy-poll while they wait (comm.sync_spin_ms unset: every
# rank has a core); 4 ranks sleep in select: both ways of waiting are covered.
@pytest.mark.parametrize("world_size", [2, 4])
@pytest.mark.slow
def test_large_sum_is_correct_and_bit_identical(tmp_path: Path, world_size: int) -> None:
    run_ranks(_large_sum_worker, world_size, tmp_path)
    expected = sum(
        torch.randn(LARGE, generator=torch.Generator().manual_seed(r)).double() for r in range(world_size)
    ).numpy()
    results = [np.load(tmp_path / f"rank{r}.npy") for r in range(world_size)]
    for result in results[1:]:
        np.testing.assert_array_equal(result, results[0])
    np.testing.assert_allclose(results[0], expected, rtol=1e-5, atol=1e-4)


def _peer_leaves_worker(comm: TorchComm, out: Path) -> None:
    if comm.rank == 1:
        comm.close()  # closes its sockets and leaves
        return
    time.sleep(1.0)
    start = time.monotonic()
    with pytest.raises(PeerFailure, match="allreduce_sum_ failed"):
        comm.allreduce_sum_(torch.ones(10))
    (out / "elapsed").write_text(str(time.monotonic() - start))


@pytest.mark.slow
def test_closed_peer_fails_the_sum_at_once(tmp_path: Path) -> None:
    run_ranks(_peer_leaves_worker, 2, tmp_path)
    # Far below the 60 s timeout the ranks were given: the closed connection is seen directly.
    assert float((tmp_path / "elapsed").read_text()) < 5.0


def _mismatch_worker(comm: TorchComm, out: Path) -> None:
    comm.allreduce_sum_(torch.ones(8))  # one agreed sum first: the sequence numbers count
    size = 3 if comm.rank == 0 else 4  # a key on one rank only: the ranks disagree on the size
    with pytest.raises(CollectiveMismatch) as info:
        comm.allreduce_sum_(torch.ones(size, dtype=torch.float64))
    (out / f"rank{comm.rank}").write_text(str(info.value))


@pytest.mark.slow
def test_ranks_that_disagree_on_a_sum_fail_at_once_naming_both(tmp_path: Path) -> None:
    start = time.monotonic()
    run_ranks(_mismatch_worker, 2, tmp_path)
    assert time.monotonic() - start < 30  # no waiting for the 60 s timeout
    rank0 = (tmp_path / "rank0").read_text()
    assert "rank 0 sums 24 bytes of float64 as its sum #2, but rank 1 sent 32 bytes of float64" in rank0
    assert (
        "rank 1 sums 32 bytes of float64 as its sum #2, but rank 0 sent 24 bytes"
        in (tmp_path / "rank1").read_text()
    )


def _many_descriptors_worker(comm: TorchComm, out: Path) -> None:
    # select() raised ValueError for any descriptor past 1023: open 1100 files, then a second set
    # of sum sockets (through the group's store), whose descriptors are numbered above that.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 4096), hard))
    held = [open(os.devnull) for _ in range(1100)]  # noqa: SIM115
    try:
        store = dist.PrefixStore("descriptors", comm._store)
        sums = SocketSum(store, comm.rank, comm.world_size, "127.0.0.1", timeout_s=30.0)
        assert min(peer.fileno() for peer in sums._peers) > 1024
        values = torch.full((5,), float(comm.rank + 1))
        sums.sum_(values)
        sums.close()
        (out / f"rank{comm.rank}").write_text(str(values.tolist()))
    finally:
        for f in held:
            f.close()


@pytest.mark.slow
def test_sums_work_with_over_a_thousand_open_descriptors(tmp_path: Path) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"the hard limit on open files here is {hard}")
    run_ranks(_many_descriptors_worker, 2, tmp_path)
    for rank in range(2):
        assert (tmp_path / f"rank{rank}").read_text() == str([3.0] * 5)


def test_stray_connections_are_dropped_and_the_real_peers_accepted(capfd: pytest.CaptureFixture[str]) -> None:
    """A listener expecting ranks 1 and 2 gets, in turn: a connection without the token, one with
    the token but an unknown rank, the real rank 1, a duplicate rank 1, then the real rank 2."""
    token = b"t" * TOKEN_BYTES
    listener = socket.create_server(("127.0.0.1", 0))
    address = listener.getsockname()
    result: dict = {}
    accepting = threading.Thread(
        target=lambda: result.update(accept_partners(listener, token, {1, 2}, timeout_s=20))
    )
    accepting.start()

    def dial(hello: bytes) -> socket.socket:
        sock = socket.create_connection(address)
        sock.sendall(hello)
        return sock

    hello = struct.Struct(f"!{TOKEN_BYTES}si")
    strays = [dial(hello.pack(b"x" * TOKEN_BYTES, 1)), dial(hello.pack(token, 7))]
    real = {1: dial(hello.pack(token, 1))}
    time.sleep(0.2)  # rank 1 is in before its duplicate
    strays.append(dial(hello.pack(token, 1)))
    time.sleep(0.2)
    real[2] = dial(hello.pack(token, 2))
    accepting.join(30)
    listener.close()
    assert sorted(result) == [1, 2]
    for rank, sock in real.items():  # the accepted sockets are the real peers' own connections
        result[rank].sendall(f"hello {rank}".encode())
        assert sock.recv(16) == f"hello {rank}".encode()
    for sock in strays:  # every stray was closed by the listener
        assert sock.recv(1) == b""
    warnings = [line for line in capfd.readouterr().err.splitlines() if "dropped a connection" in line]
    assert len(warnings) == 3
    assert "without the run's token" in warnings[0]
    assert "claiming rank 7, which is not a partner" in warnings[1]
    assert "claiming rank 1, which is already connected" in warnings[2]
    for sock in [*strays, *real.values(), *result.values()]:
        sock.close()
