"""The torch part of the communicator: tensors and gradients.

``TorchComm`` is the single-process version (tensor collectives are identities);
``TorchGroupComm`` carries every call over an initialised torch.distributed process group (its
sums over distrl's own sockets, ``distrl.socket_sum``, for CPU groups of 2^k ranks). Nothing
outside ``distrl.comm`` and ``distrl.launch`` creates a group.
"""

from __future__ import annotations

import contextlib
import functools
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.distributed as dist

from distrl.allocator import release_freed_memory
from distrl.comm.base import Comm
from distrl.comm.buckets import BROADCAST_BUCKET_BYTES, buckets
from distrl.errors import PeerFailure
from distrl.learner_memory import check_sharding_layout
from distrl.socket_sum import TRANSPORT_ERRORS, SocketSum, recursive_doubling_fits
from distrl.timing import PhaseClock


class TorchComm(Comm):
    """Torch tensor collectives for one process: identities. Subclassed for a process group."""

    time_sync_wait: bool = False
    """Split gradient-sync time into waiting and transfer (``comm.time_sync_wait``)."""

    def allreduce_sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def allreduce_mean_(self, tensor: torch.Tensor) -> torch.Tensor:
        return tensor

    def broadcast_(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        return tensor

    def sum_scalars(self, values: Sequence[float]) -> list[float]:
        """Sum a few Python numbers over all ranks in one collective."""
        buf = torch.tensor(values, dtype=torch.float64, device=self._scalar_device())
        return self.allreduce_sum_(buf).tolist()

    def merge_moments(
        self, count: float, mean: torch.Tensor, m2: torch.Tensor
    ) -> tuple[float, torch.Tensor, torch.Tensor]:
        """Combine per-rank (count, mean, sum of squared deviations) into the global ones.

        Exact parallel-variance merge (Chan et al.): the global mean first, then each rank's M2
        shifted to it, so the result equals the moments of the concatenated data.
        """
        if self.world_size == 1:
            return count, mean, m2
        head = torch.cat([torch.tensor([count], dtype=torch.float64), count * mean.double()])
        head = self.allreduce_sum_(head)
        total = float(head[0])
        global_mean = head[1:] / max(total, 1.0)
        shifted = m2.double() + count * (mean.double() - global_mean) ** 2
        return total, global_mean, self.allreduce_sum_(shifted)

    def sum_gradients_(self, bucket: torch.Tensor, clock: PhaseClock | None = None) -> None:
        """All-reduce sum of a flat gradient bucket (``FlatGradients.average_``'s hook), timed
        in ``grad_sync_time_s`` and, on ``clock`` (the training loop's), the ``sync`` phase;
        with ``time_sync_wait`` a one-number sum first tells waiting for the slowest rank
        (``sync_wait``) from the transfer (``sync_transfer``), at the cost of that extra
        collective."""
        if self.world_size == 1:
            return
        clock = clock or PhaseClock()
        start = time.perf_counter()
        if self.time_sync_wait:
            with clock("sync_wait"):
                self.sum_scalars([0.0])  # returns once the last rank has arrived
            with clock("sync_transfer"):
                self.allreduce_sum_(bucket)
        else:
            with clock("sync"):
                self.allreduce_sum_(bucket)
        self.grad_sync_time_s += time.perf_counter() - start

    def broadcast_parameters_(self, module: torch.nn.Module, src: int = 0) -> None:
        """Make every rank hold rank ``src``'s parameters and buffers, exactly, in their own
        dtypes: a few collectives of at most ``BROADCAST_BUCKET_BYTES`` each, so no rank holds a
        second copy of a large model."""
        if self.world_size == 1:
            return
        tensors = [t.data for t in (*module.parameters(), *module.buffers())]
        # gloo sends no bool: the same bytes as uint8.
        tensors = [t.view(torch.uint8) if t.dtype == torch.bool else t for t in tensors]
        for bucket in buckets(tensors, BROADCAST_BUCKET_BYTES):
            if len(bucket) == 1 and bucket[0].is_contiguous():
                self.broadcast_(bucket[0], src)  # in place
                continue
            flat = self.broadcast_(torch.cat([t.reshape(-1) for t in bucket]), src)
            for t, received in zip(bucket, flat.split([t.numel() for t in bucket]), strict=True):
                t.copy_(received.view_as(t))

    def shard_(
        self,
        module: torch.nn.Module,
        sharding: str,
        param_dtype: torch.dtype | None = None,
        offload: bool = False,
    ) -> None:
        """Shard ``module``'s weights, gradients and optimiser state over the ranks (``comm.sharded``)
        when ``sharding`` (``train.sharding``) asks; one process has nothing to shard over.
        ``param_dtype`` and ``offload``: ``comm.sharded.shard_module_``'s."""

    def _scalar_device(self) -> torch.device:
        return torch.device("cpu")


def _collective(method: Callable) -> Callable:
    """Turn a failed collective into a PeerFailure that says what most likely happened."""

    @functools.wraps(method)
    def wrapper(self: TorchGroupComm, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except (RuntimeError, *TRANSPORT_ERRORS) as exc:
            # Only a failed transport (closed, reset, timed out, unreachable) or gloo's report of
            # one; anything else is a bug and keeps its traceback.
            if not _failed_transport(exc):
                raise
            raise self.peer_failure(method.__name__, exc) from None

    return wrapper


TRANSPORT_FAILURE = re.compile(
    r"timed out|timeout|connection (closed|reset|refused)|read error|write error|broken pipe|aborted|"
    r"network error|remote process exited",
    re.IGNORECASE,
)
"""What gloo's and NCCL's reports of a failed transport say (not their reports of a bug, such as
ranks sending different sizes)."""
COLLECTIVE_LIBRARY = re.compile(r"/gloo/|NCCL")
"""Where such a report comes from (a user's error mentioning a timeout is not one)."""


def _failed_transport(exc: BaseException) -> bool:
    """A collective's failed transport: torch's DistError, a socket's OSError, or gloo's and
    NCCL's reports as plain RuntimeErrors (a timed-out send of ``all_gather``, FSDP's gathers)."""
    if isinstance(exc, (dist.DistError, *TRANSPORT_ERRORS)):
        return True
    message = str(exc)
    return (
        isinstance(exc, RuntimeError)
        and COLLECTIVE_LIBRARY.search(message) is not None
        and TRANSPORT_FAILURE.search(message) is not None
    )


REPORT_WAIT_S = 2.0
"""How long a rank whose collective failed waits for the others to say theirs failed too."""


def silent_ranks(store: dist.Store | None, rank: int, world_size: int) -> str:
    """After a failed collective, which ranks are to blame, as the end of the one line: each rank
    whose collective failed says so in the group's store, and those that say nothing within
    ``REPORT_WAIT_S`` died, hung (a stopped process, a deadlock) or were cut off. Costs nothing
    until a collective fails. "" when the store cannot tell. The store is asked from a thread
    given ``REPORT_WAIT_S`` and a second more: a store cut off with its host may block a call
    far longer than that."""
    if store is None:
        return ""
    said: list[str] = []
    asking = threading.Thread(target=_ask_store, args=(store, rank, world_size, said), daemon=True)
    asking.start()
    asking.join(REPORT_WAIT_S + 1.0)
    return (
        said[0]
        if said
        else "; the group's store is unreachable too: its host (rank 0 or the launcher) is gone"
    )


def _ask_store(store: dist.Store, rank: int, world_size: int, said: list[str]) -> None:
    keys = [f"distrl/collective-failed/{r}" for r in range(world_size)]
    try:
        store.set(keys[rank], "1")
        deadline = time.monotonic() + REPORT_WAIT_S
        while (silent := [r for r, key in enumerate(keys) if not store.check([key])]) and (
            time.monotonic() < deadline
        ):
            time.sleep(0.1)
    except (dist.DistError, RuntimeError, *TRANSPORT_ERRORS):
        return
    if not silent:
        said.append("; every rank's collective failed: the network between them broke")
        return
    named = ", ".join(map(str, silent))
    said.append(f"; rank {named} did not say its collective failed: it died, hung or was cut off")


class TorchGroupComm(TorchComm):
    """Collectives on an initialised torch.distributed process group."""

    def __init__(
        self,
        device: torch.device,
        store: dist.Store | None = None,
        socket_sum: SocketSum | None = None,
        sum_algorithm: str = "auto",
    ) -> None:
        """``store``: the group's key-value store (for arrival counts). ``sum_algorithm``:
        ``auto``, ``socket`` (needs ``socket_sum``), ``recursive_doubling`` (gloo, 2^k ranks) or
        ``all_reduce``; ``auto`` takes the first that applies."""
        super().__init__()
        self._store = store
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.silent_ranks = functools.partial(silent_ranks, store, self.rank, self.world_size)
        """The failed collective's culprits, as the end of its one line."""
        gloo = dist.get_backend() != "nccl"
        # NCCL only moves CUDA tensors; gloo moves CPU tensors.
        self._device = torch.device("cpu") if gloo else device
        self._socket_sum = socket_sum
        if sum_algorithm == "auto":
            # gloo's all_reduce costs ~1 ms even for a few floats on small CPU hosts, several times
            # more than log2(N) rounds of paired isend/irecv, and those several times more than
            # the same rounds on our own sockets (benchmarks/grad_sync_bench.py). ``connect``
            # opens the sockets exactly where recursive doubling fits a gloo group.
            sum_algorithm = "all_reduce"
            if socket_sum is not None:
                sum_algorithm = "socket"
            elif gloo and recursive_doubling_fits(self.world_size):
                sum_algorithm = "recursive_doubling"
        sums = {"all_reduce": _all_reduce_sum_, "recursive_doubling": _recursive_doubling_sum_}
        if socket_sum is not None:
            sums["socket"] = socket_sum.sum_
        self.sum_algorithm = sum_algorithm
        self._sum_ = sums[sum_algorithm]

    def peer_failure(self, what: str, exc: BaseException) -> PeerFailure:
        """The one line for a collective (``what``) that failed with ``exc``, naming the ranks
        that did not say theirs failed too."""
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return PeerFailure(
            f"rank {self.rank}: {what} failed; another rank died, hung past comm.timeout_s or "
            f"became unreachable ({detail}){self.silent_ranks()}"
        )

    @contextlib.contextmanager
    def peer_failures_named(self) -> Iterator[None]:
        """``Comm.peer_failures_named``: a failed transport under it is a PeerFailure."""
        try:
            yield
        except RuntimeError as exc:
            if not _failed_transport(exc):
                raise
            raise self.peer_failure("a collective torch ran itself (FSDP's, say)", exc) from None

    ranks_per_node: int = 1
    """Ranks on each node (the launcher's), for HSDP's mesh."""

    def shard_(
        self,
        module: torch.nn.Module,
        sharding: str,
        param_dtype: torch.dtype | None = None,
        offload: bool = False,
    ) -> None:
        if sharding == "none":
            return
        from torch.distributed.device_mesh import init_device_mesh

        from distrl.comm.sharded import shard_module_

        check_sharding_layout(sharding, self.world_size, self.ranks_per_node)
        if sharding == "hsdp":
            nodes = self.world_size // self.ranks_per_node
            mesh = init_device_mesh(
                self._device.type, (nodes, self.ranks_per_node), mesh_dim_names=("replicate", "shard")
            )
        else:
            mesh = init_device_mesh(self._device.type, (self.world_size,))
        shard_module_(module, mesh, param_dtype, offload and self._device.type == "cuda")
        release_freed_memory()  # the whole weights each rank held until now

    @_collective
    def allreduce_sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        return self._on_device(tensor, self._sum_)

    @_collective
    def allreduce_mean_(self, tensor: torch.Tensor) -> torch.Tensor:
        def reduce(t: torch.Tensor) -> None:
            self._sum_(t)
            t.div_(self.world_size)

        return self._on_device(tensor, reduce)

    @_collective
    def broadcast_(self, tensor: torch.Tensor, src: int = 0) -> torch.Tensor:
        return self._on_device(tensor, lambda t: dist.broadcast(t, src=src))

    @_collective
    def all_gather_bytes(self, payload: bytes) -> list[bytes]:
        sizes = torch.zeros(self.world_size, dtype=torch.int64, device=self._device)
        sizes[self.rank] = len(payload)
        dist.all_reduce(sizes)
        longest = int(sizes.max())
        mine = torch.zeros(longest, dtype=torch.uint8, device=self._device)
        mine[: len(payload)] = torch.frombuffer(bytearray(payload), dtype=torch.uint8)
        chunks = [torch.empty_like(mine) for _ in range(self.world_size)]
        dist.all_gather(chunks, mine)
        return [bytes(c[: int(n)].cpu().numpy()) for c, n in zip(chunks, sizes, strict=True)]

    @_collective
    def broadcast_bytes(self, payload: bytes | None, src: int = 0) -> bytes:
        size = torch.tensor([len(payload) if self.rank == src else 0], device=self._device)
        dist.broadcast(size, src=src)
        buf = torch.zeros(int(size), dtype=torch.uint8, device=self._device)
        if self.rank == src:
            buf.copy_(torch.frombuffer(bytearray(payload), dtype=torch.uint8))
        dist.broadcast(buf, src=src)
        return bytes(buf.cpu().numpy())

    @_collective
    def arrive(self, key: str) -> int:
        return self._counter_store().add(key, 1)

    @_collective
    def arrivals(self, key: str) -> int:
        return self._counter_store().add(key, 0)

    @_collective
    def forget(self, key: str) -> None:
        self._counter_store().delete_key(key)

    def _counter_store(self) -> dist.Store:
        assert self._store is not None, "arrival counts need the process group's store"
        return self._store

    @_collective
    def barrier(self) -> None:
        dist.barrier()

    def close(self) -> None:
        if self._socket_sum is not None:
            self._socket_sum.close()
        if dist.is_initialized():
            dist.destroy_process_group()

    def _scalar_device(self) -> torch.device:
        return self._device

    def _on_device(self, tensor: torch.Tensor, op) -> torch.Tensor:
        """Run ``op`` on ``tensor``, staging through the comm device when they differ."""
        if tensor.device == self._device:
            op(tensor)
            return tensor
        staged = tensor.to(self._device)
        op(staged)
        tensor.copy_(staged)
        return tensor


def _all_reduce_sum_(tensor: torch.Tensor) -> None:
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)


def _recursive_doubling_sum_(tensor: torch.Tensor) -> None:
    """In-place sum over a power-of-two group: in round k each rank swaps its partial sum with
    rank ^ 2**k and adds. Both partners add the same two values and IEEE addition commutes, so
    every rank ends with bit-identical sums."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    received = torch.empty_like(tensor)
    mask = 1
    while mask < world_size:
        peer = rank ^ mask
        ops = [dist.P2POp(dist.isend, tensor, peer), dist.P2POp(dist.irecv, received, peer)]
        for request in dist.batch_isend_irecv(ops):
            request.wait()
        tensor.add_(received)
        mask <<= 1
