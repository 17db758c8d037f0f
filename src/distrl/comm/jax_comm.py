"""The JAX part of the communicator: the loop's calls over jax.distributed, and the mesh the JAX
learners sum gradients on.

Every process of a JAX run holds its local devices' share of one global ``Mesh`` (axis
``ranks``, one device per process); gradients are summed inside the compiled update with
``lax.psum`` over that axis (gloo between CPU processes, from jax 0.6.2 on). The framework-neutral
calls (bytes, sums of a few numbers, barrier) go through ``jax.experimental.multihost_utils``;
numbers travel as float64 bytes and are summed in rank order, so every rank gets bit-identical
sums whatever JAX's x64 setting.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from distrl.comm.base import Comm

AXIS = "ranks"
"""The mesh axis that names the processes (gradients are summed over it)."""


class JaxComm(Comm):
    """One JAX process among ``jax.process_count()``; a lone process is the same object with a
    one-device mesh, so the learners have one code path."""

    def __init__(self) -> None:
        super().__init__()
        self.rank = jax.process_index()
        self.world_size = jax.process_count()
        # The first device of every process, in process order: rank r's shard is row r.
        firsts = {}
        for device in jax.devices():
            firsts.setdefault(device.process_index, device)
        self.device = firsts[self.rank]
        self.mesh = Mesh(np.array([firsts[r] for r in range(self.world_size)]), (AXIS,))
        self.replicated = NamedSharding(self.mesh, PartitionSpec())
        self.per_rank = NamedSharding(self.mesh, PartitionSpec(AXIS))

    # ----------------------------------------------------------------------------- arrays
    def replicate(self, tree):
        """Local arrays equal on every rank -> global arrays replicated over the mesh."""
        return jax.tree.map(
            lambda x: jax.make_array_from_single_device_arrays(
                x.shape, self.replicated, [jax.device_put(x, self.device)]
            ),
            tree,
        )

    def stack_ranks(self, tree):
        """This rank's local arrays -> global arrays with a leading ``ranks`` axis, row r
        rank r's (the arrays' shapes must agree across ranks)."""
        return jax.tree.map(
            lambda x: jax.make_array_from_single_device_arrays(
                (self.world_size, *x.shape), self.per_rank, [jax.device_put(x[None], self.device)]
            ),
            tree,
        )

    def local(self, tree):
        """Global arrays -> this rank's own shard (the whole array when replicated)."""
        return jax.tree.map(lambda x: x.addressable_data(0), tree)

    def own_rows(self, tree):
        """Global arrays from ``stack_ranks`` or a per-rank output -> this rank's row."""
        return own_row(self.local(tree))

    # ----------------------------------------------------------------------------- the loop's
    def all_gather_bytes(self, payload: bytes) -> list[bytes]:
        if self.world_size == 1:
            return [payload]
        sizes = np.asarray(multihost_utils.process_allgather(np.array([len(payload)], np.int32)))[:, 0]
        buf = np.zeros(max(int(sizes.max()), 1), np.uint8)
        buf[: len(payload)] = np.frombuffer(payload, np.uint8)
        rows = np.asarray(multihost_utils.process_allgather(buf))
        return [rows[r, : sizes[r]].tobytes() for r in range(self.world_size)]

    def broadcast_bytes(self, payload: bytes | None, src: int = 0) -> bytes:
        if self.world_size == 1:
            return super().broadcast_bytes(payload, src)
        return self.all_gather_bytes(payload if self.rank == src else b"")[src]

    def sum_scalars(self, values: Sequence[float]) -> list[float]:
        mine = np.asarray(values, np.float64).tobytes()
        rows = [np.frombuffer(b, np.float64) for b in self.all_gather_bytes(mine)]
        total = rows[0].copy()
        for row in rows[1:]:
            total += row
        return total.tolist()

    def barrier(self) -> None:
        if self.world_size > 1:
            multihost_utils.sync_global_devices("distrl barrier")

    def arrive(self, key: str) -> int:
        raise NotImplementedError("arrival counts (train.straggler_threshold) need the torch learners")

    arrivals = arrive

    def close(self) -> None:
        if self.world_size > 1:
            jax.distributed.shutdown()


def own_row(tree):
    """Inside ``shard_map`` (or on a rank's shard): row 0 of each leaf, the rank's own."""
    return jax.tree.map(lambda x: x[0], tree)


def as_row(tree):
    """Inside ``shard_map``: each leaf as one row of a per-rank output (``P(AXIS)``)."""
    return jax.tree.map(lambda x: x[None], tree)
