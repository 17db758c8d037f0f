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
ephemeral port of the collectives' address and publishes it, and rank 0 publishes a random token
for the run; each rank dials its lower-ranked partners and accepts the higher-ranked ones. A
connection counts only when it opens with the token and a rank the listener is still waiting
for: anything else that reaches the port is dropped, said on stderr, and the listener keeps
waiting for its real peers. Every message then carries a header (sequence number, byte count,
dtype), so two ranks that disagree on a collective fail at once, naming both sides, instead of
reading each other's next message.
"""

from __future__ import annotations

import secrets
import selectors
import socket
import struct
import sys
import time

import torch
import torch.distributed as dist

from distrl.errors import CollectiveMismatch

TOKEN_BYTES = 16
_HELLO = struct.Struct(f"!{TOKEN_BYTES}si")
"""A dialling rank's first bytes: the run's token and its rank."""
_HEADER = struct.Struct("!QQ16s")
"""Before every message: sequence number, payload bytes, dtype name."""
TRANSPORT_ERRORS = (OSError,)
"""What a failed network looks like to socket calls: closed, reset, timed out or unreachable
connections all raise OSError subclasses (ConnectionError, TimeoutError, ...)."""


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
        self._partners = [rank ^ (1 << k) for k in range(world_size.bit_length() - 1)]
        self._peers = _connect(store, rank, self._partners, host, timeout_s)
        # One selector (epoll: no limit on descriptor numbers) per peer, so a wait sees only the
        # partner of its round.
        self._selectors = [selectors.DefaultSelector() for _ in self._peers]
        for selector, peer in zip(self._selectors, self._peers, strict=True):
            selector.register(peer, selectors.EVENT_READ)
        self._received: dict[tuple[int, torch.dtype], torch.Tensor] = {}
        self._sequence = 0

    def sum_(self, tensor: torch.Tensor) -> None:
        received = self._buffer_like(tensor)
        send, recv = _bytes(tensor), _bytes(received)
        dtype = str(tensor.dtype).removeprefix("torch.").encode()
        rounds = zip(self._partners, self._peers, self._selectors, strict=True)
        for partner, peer, selector in rounds:  # round order: partner rank ^ 1, then ^ 2, ...
            self._sequence += 1
            header = _HEADER.pack(self._sequence, len(send), dtype)
            self._exchange(partner, peer, selector, header, send, recv)
            tensor.add_(received)

    def close(self) -> None:
        for selector in self._selectors:
            selector.close()
        for peer in self._peers:
            peer.close()
        self._peers, self._selectors = [], []

    def _buffer_like(self, tensor: torch.Tensor) -> torch.Tensor:
        key = (tensor.numel(), tensor.dtype)
        if key not in self._received:
            self._received[key] = torch.empty(tensor.numel(), dtype=tensor.dtype)
        return self._received[key].view_as(tensor)

    def _exchange(
        self,
        partner: int,
        peer: socket.socket,
        selector: selectors.BaseSelector,
        header: bytes,
        send: memoryview,
        recv: memoryview,
    ) -> None:
        """Send header + message and receive the partner's at once: with both sides sending
        first, a message larger than the socket buffers would deadlock a plain sendall-then-recv.
        Each pass tries both directions with one gathering send and one scattering receive, and
        waits only when neither moved a byte; the partner's header is checked as soon as it is in,
        before any of its payload is used."""
        outgoing = [memoryview(header), send]
        their_header = bytearray(_HEADER.size)
        incoming = [memoryview(their_header), recv]
        received = 0
        while outgoing or incoming:
            sent = _send_some(peer, outgoing) if outgoing else 0
            got = _recv_some(peer, incoming) if incoming else 0
            if received < _HEADER.size <= received + got:
                self._check_header(partner, header, bytes(their_header))
            received += got
            if sent or got:
                continue
            readable, writable = self._wait(selector, peer, reading=bool(incoming), writing=bool(outgoing))
            if not readable and not writable:
                raise TimeoutError(f"no data moved to or from rank {partner} within {self._timeout_s:.0f} s")

    def _check_header(self, partner: int, mine: bytes, theirs: bytes) -> None:
        if mine == theirs:
            return
        my_seq, my_bytes, my_dtype = _HEADER.unpack(mine)
        seq, nbytes, dtype = _HEADER.unpack(theirs)
        raise CollectiveMismatch(
            f"rank {self._rank} sums {my_bytes} bytes of {_name(my_dtype)} as its sum #{my_seq}, but rank "
            f"{partner} sent {nbytes} bytes of {_name(dtype)} as its sum #{seq}: the ranks disagree on "
            "what they sum (a bug, not a network fault)"
        )

    def _wait(
        self, selector: selectors.BaseSelector, peer: socket.socket, reading: bool, writing: bool
    ) -> tuple[bool, bool]:
        """Poll without sleeping for up to ``spin_s``, then sleep in the selector up to the timeout."""
        events = (selectors.EVENT_READ if reading else 0) | (selectors.EVENT_WRITE if writing else 0)
        if selector.get_key(peer).events != events:
            selector.modify(peer, events)
        deadline = time.perf_counter() + self._spin_s
        while True:
            ready = selector.select(0)
            if ready or time.perf_counter() >= deadline:
                break
        if not ready:
            ready = selector.select(self._timeout_s)
        mask = 0
        for _, event_mask in ready:
            mask |= event_mask
        return bool(mask & selectors.EVENT_READ), bool(mask & selectors.EVENT_WRITE)


def _name(dtype: bytes) -> str:
    return dtype.rstrip(b"\0").decode()


def _bytes(tensor: torch.Tensor) -> memoryview:
    return memoryview(tensor.numpy()).cast("B")


def _send_some(peer: socket.socket, views: list[memoryview]) -> int:
    """Send what the socket takes from ``views`` in one call and drop it from them."""
    try:
        n = peer.sendmsg(views)
    except BlockingIOError:
        return 0
    _advance(views, n)
    return n


def _recv_some(peer: socket.socket, views: list[memoryview]) -> int:
    """Receive what has arrived into ``views`` in one call and drop the filled part from them;
    0 when nothing has arrived yet (a spurious wake-up included)."""
    try:
        n = peer.recvmsg_into(views)[0]
    except BlockingIOError:
        return 0
    if n == 0:
        raise ConnectionError("a peer closed its connection")
    _advance(views, n)
    return n


def _advance(views: list[memoryview], n: int) -> None:
    while n and views:
        if n >= len(views[0]):
            n -= len(views.pop(0))
        else:
            views[0] = views[0][n:]
            n = 0


def _connect(
    store: dist.Store, rank: int, partners: list[int], host: str, timeout_s: float
) -> list[socket.socket]:
    """One connected, non-blocking socket per partner, in partner order."""
    token = _run_token(store, rank)
    listener = socket.create_server((host, 0), backlog=len(partners) + 8)
    store.set(f"socket_sum/{rank}", f"{host}:{listener.getsockname()[1]}")
    connections: dict[int, socket.socket] = {}
    for peer in (p for p in partners if p < rank):
        address, port = store.get(f"socket_sum/{peer}").decode().rsplit(":", 1)
        sock = socket.create_connection((address, int(port)), timeout=timeout_s)
        sock.sendall(_HELLO.pack(token, rank))
        connections[peer] = sock
    connections.update(accept_partners(listener, token, {p for p in partners if p > rank}, timeout_s))
    listener.close()
    for sock in connections.values():
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)
    return [connections[p] for p in partners]


def accept_partners(
    listener: socket.socket, token: bytes, expected: set[int], timeout_s: float
) -> dict[int, socket.socket]:
    """Accept one connection from each rank in ``expected``. A connection that does not open with
    ``token`` and a rank still expected (a stray, an unknown or a duplicate rank) is closed and
    reported, and the wait goes on until ``timeout_s`` has passed in all."""
    deadline = time.monotonic() + timeout_s
    accepted: dict[int, socket.socket] = {}
    while len(accepted) < len(expected):
        listener.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            sock, address = listener.accept()
        except TimeoutError:
            missing = sorted(expected - set(accepted))
            raise TimeoutError(f"ranks {missing} did not connect within {timeout_s:.0f} s") from None
        sock.settimeout(max(deadline - time.monotonic(), 0.001))
        try:
            their_token, their_rank = _HELLO.unpack(_recv_exactly(sock, _HELLO.size))
        except TRANSPORT_ERRORS:
            their_token, their_rank = b"", -1
        if not secrets.compare_digest(their_token, token):
            reason = "without the run's token"
        elif their_rank not in expected:
            reason = f"claiming rank {their_rank}, which is not a partner of this rank"
        elif their_rank in accepted:
            reason = f"claiming rank {their_rank}, which is already connected"
        else:
            accepted[their_rank] = sock
            continue
        sock.close()
        where = f"{address[0]}:{address[1]}"
        print(f"distrl: warning: dropped a connection from {where} {reason}", file=sys.stderr)
    return accepted


def _run_token(store: dist.Store, rank: int) -> bytes:
    """Rank 0 draws the run's token; every rank reads it from the store (only peers reach it)."""
    if rank == 0:
        store.set("socket_sum/token", secrets.token_bytes(TOKEN_BYTES))
    return store.get("socket_sum/token")


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionError("a peer closed its connection while connecting")
        data += chunk
    return data
