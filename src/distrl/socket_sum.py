"""Sum CPU tensors over a power-of-two group through direct TCP connections between ranks.

gloo runs every operation on a worker thread and hands the result back to the caller, which on
small CPU hosts costs 0.3-1 ms per exchange; a blocking send/recv on a socket the caller owns
costs ~50 µs (benchmarks/grad_sync_bench.py). Gradient syncs happen once per minibatch, so this
difference decides how DD-PPO scales on CPUs. The arithmetic is gloo-free recursive doubling: in
round k each rank swaps its partial sum with rank ^ 2**k and adds, so both partners add the same
two values and every rank ends with bit-identical sums.

A rank that waits for its partner first polls the socket without sleeping for up to ``spin_s``
(as MPI libraries and NCCL do). On the 2-vCPU VM this made the 2-rank CartPole loop ~20% faster
(BENCHMARKS.md); the likely reason, not proven, is that a sleeping process lets the hypervisor
hand its vCPU to someone else and getting it back costs more than the wait.

Connections are made once, through the process group's key-value store: every rank listens on an
ephemeral port of the collectives' address and publishes it; each rank dials its lower-ranked
partners and accepts the higher-ranked ones.
"""

from __future__ import annotations

import select
import socket
import struct
import time

import torch
import torch.distributed as dist


def recursive_doubling_fits(world_size: int) -> bool:
    """Recursive doubling pairs every rank with rank ^ 2**k: it needs a power-of-two group."""
    return world_size & (world_size - 1) == 0


class SocketSum:
    """In-place sum of a contiguous CPU tensor over all ranks (``world_size`` a power of two)."""

    def __init__(
        self, store: dist.Store, rank: int, world_size: int, host: str, timeout_s: float, spin_s: float = 0.0
    ) -> None:
        assert recursive_doubling_fits(world_size), "recursive doubling needs a power-of-two group"
        self._rank = rank
        self._timeout_s = timeout_s
        self._spin_s = spin_s
        partners = [rank ^ (1 << k) for k in range(world_size.bit_length() - 1)]
        self._peers = _connect(store, rank, partners, host, timeout_s)
        self._received: dict[tuple[int, torch.dtype], torch.Tensor] = {}

    def sum_(self, tensor: torch.Tensor) -> None:
        received = self._buffer_like(tensor)
        send, recv = _bytes(tensor), _bytes(received)
        for peer in self._peers:  # ordered by round: partner rank ^ 1, then ^ 2, ...
            self._exchange(peer, send, recv)
            tensor.add_(received)

    def close(self) -> None:
        for peer in self._peers:
            peer.close()
        self._peers = []

    def _buffer_like(self, tensor: torch.Tensor) -> torch.Tensor:
        key = (tensor.numel(), tensor.dtype)
        if key not in self._received:
            self._received[key] = torch.empty(tensor.numel(), dtype=tensor.dtype)
        return self._received[key].view_as(tensor)

    def _exchange(self, peer: socket.socket, send: memoryview, recv: memoryview) -> None:
        """Send and receive at once: with both sides sending first, a message larger than the
        socket buffers would deadlock a plain sendall-then-recv."""
        sent = got = 0
        while sent < len(send) or got < len(recv):
            readers = [peer] if got < len(recv) else []
            writers = [peer] if sent < len(send) else []
            readable, writable = self._wait(readers, writers)
            if not readable and not writable:
                raise TimeoutError(f"no data moved to or from a peer within {self._timeout_s:.0f} s")
            if writable:
                sent += _send_some(peer, send[sent:])
            if readable:
                n = peer.recv_into(recv[got:])
                if n == 0:
                    raise ConnectionError("a peer closed its connection")
                got += n

    def _wait(self, readers: list[socket.socket], writers: list[socket.socket]) -> tuple[list, list]:
        """Poll without sleeping for up to ``spin_s``, then sleep in select up to the timeout."""
        deadline = time.perf_counter() + self._spin_s
        while True:
            readable, writable, _ = select.select(readers, writers, [], 0)
            if readable or writable or time.perf_counter() >= deadline:
                break
        if not readable and not writable:
            readable, writable, _ = select.select(readers, writers, [], self._timeout_s)
        return readable, writable


def _bytes(tensor: torch.Tensor) -> memoryview:
    return memoryview(tensor.numpy()).cast("B")


def _send_some(peer: socket.socket, data: memoryview) -> int:
    try:
        return peer.send(data)
    except BlockingIOError:
        return 0


def _connect(
    store: dist.Store, rank: int, partners: list[int], host: str, timeout_s: float
) -> list[socket.socket]:
    """One connected, non-blocking socket per partner, in partner order."""
    listener = socket.create_server((host, 0), backlog=len(partners))
    listener.settimeout(timeout_s)
    store.set(f"socket_sum/{rank}", f"{host}:{listener.getsockname()[1]}")
    connections: dict[int, socket.socket] = {}
    for peer in (p for p in partners if p < rank):
        address, port = store.get(f"socket_sum/{peer}").decode().rsplit(":", 1)
        sock = socket.create_connection((address, int(port)), timeout=timeout_s)
        sock.sendall(struct.pack("!i", rank))
        connections[peer] = sock
    for _ in (p for p in partners if p > rank):
        sock, _ = listener.accept()
        sock.settimeout(timeout_s)
        (peer,) = struct.unpack("!i", _recv_exactly(sock, 4))
        connections[peer] = sock
    listener.close()
    for sock in connections.values():
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
    return [connections[p] for p in partners]


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("a peer closed its connection while connecting")
        data += chunk
    return data
