"""The framework-neutral communicator: what the shared loop needs from the other ranks.

``Comm`` is the single-process version: every collective is the identity, so one code path
serves one or many ranks. Subclasses carry the same calls over a real group (torch.distributed
in ``torch_comm``, jax.distributed in ``jax_comm``) and add their framework's tensor calls.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

from distrl.errors import UserError


class Comm:
    """Collectives for one process: identities."""

    rank: int = 0
    world_size: int = 1

    def __init__(self) -> None:
        self.grad_sync_time_s = 0.0
        """Wall time spent inside gradient sums (waiting for peers included)."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def sum_scalars(self, values: Sequence[float]) -> list[float]:
        """Sum a few Python numbers over all ranks in one collective (the same list everywhere)."""
        return [float(v) for v in values]

    def all_gather_bytes(self, payload: bytes) -> list[bytes]:
        return [payload]

    def broadcast_bytes(self, payload: bytes | None, src: int = 0) -> bytes:
        assert payload is not None, "the source rank must provide the payload"
        return payload

    def barrier(self) -> None:
        pass

    @contextlib.contextmanager
    def peer_failures_named(self) -> Iterator[None]:
        """Around code whose collectives a library runs itself (FSDP's gathers and
        reduce-scatters): one that fails ends the run in the same one line as distrl's own
        collectives, naming the ranks to blame. One process has none."""
        yield

    def close(self) -> None:
        pass

    def run_on_main(self, fn: Callable[[], bytes]) -> bytes:
        """Run ``fn`` on rank 0 only and hand every rank its result.

        A UserError raised by ``fn`` is re-raised on every rank, so all ranks fail together
        instead of the others waiting on a collective rank 0 never reaches.
        """
        payload = None
        if self.is_main:
            try:
                payload = b"\x00" + fn()
            except UserError as exc:  # its id, a line of its own, then its message
                payload = b"\x01" + f"{exc.code or ''}\n{exc}".encode()
        payload = self.broadcast_bytes(payload)
        if payload[:1] == b"\x01":
            code, _, message = payload[1:].decode().partition("\n")
            raise UserError(message, code=code or None)
        return payload[1:]

    def arrive(self, key: str) -> int:
        """Count this rank in under ``key``; return how many ranks have arrived so far."""
        return 1

    def arrivals(self, key: str) -> int:
        """How many ranks have arrived under ``key`` (no waiting)."""
        return 0

    def forget(self, key: str) -> None:
        """Drop ``key``'s count once no rank reads it any more."""
