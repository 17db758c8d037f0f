"""Turn a Topology into a device and a communicator (a process group when there are peers)."""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

from distrl.comm import TorchComm, TorchGroupComm
from distrl.config.sections import CommConfig
from distrl.errors import PeerFailure, UserError
from distrl.launch.network import choose_interface, interface_address
from distrl.launch.topology import Topology
from distrl.socket_sum import SocketSum, recursive_doubling_fits


def resolve_device(requested: str, topology: Topology) -> torch.device:
    """``auto`` picks cuda:LOCAL_RANK when CUDA is available, else the CPU."""
    if requested == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", topology.local_rank % torch.cuda.device_count())
        return torch.device("cpu")
    try:
        device = torch.device(requested)
    except RuntimeError:
        raise UserError(
            f"--device {requested!r}: expected auto, cpu, cuda or cuda:N", code="launch-device-unknown"
        ) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise UserError(
                f"--device {requested}: CUDA is not available on this machine; use --device cpu "
                "(or auto, which takes CUDA where there is one)",
                code="launch-device-no-cuda",
            )
        if device.index is None:
            device = torch.device("cuda", topology.local_rank % torch.cuda.device_count())
    return device


AUTO_SPIN_S = 0.05
"""Default busy-poll time of a waiting rank (``comm.sync_spin_ms``), long enough to cover the
wait for a peer still collecting its rollout."""


def connect(
    topology: Topology, device: torch.device, cfg: CommConfig, cpu_collectives: bool = False
) -> TorchComm:
    """Join the process group described by ``topology``; a lone process gets the no-op TorchComm.
    ``cpu_collectives``: a CUDA group also reduces CPU tensors (gloo beside NCCL), as a sharded
    learner offloaded to the CPU does for its gradients' norm."""
    if not topology.is_distributed:
        return TorchComm()
    timeout_s = cfg.timeout_s
    interface = choose_interface(topology.master_addr, cfg.network_interface, topology.num_nodes > 1)
    backend = "nccl" if device.type == "cuda" else "gloo"
    group_backend = "cuda:nccl,cpu:gloo" if backend == "nccl" and cpu_collectives else backend
    use_sockets = _uses_socket_sum(cfg.cpu_sum, backend, topology.world_size)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    timeout = timedelta(seconds=timeout_s)
    store = _make_store(topology, timeout)
    # torchrun's agent keeps one store across restarts; a fresh key space per attempt stops a
    # restarted group from reading the dead attempt's peer addresses.
    store = dist.PrefixStore(f"distrl/attempt{topology.restart_count}", store)
    if device.type == "cuda":
        _check_one_rank_per_gpu(store, topology, device)
    dist.init_process_group(
        backend=group_backend,
        store=store,
        rank=topology.rank,
        world_size=topology.world_size,
        timeout=timeout,
    )
    socket_sum = None
    if use_sockets:
        spin_s = sync_spin_s(topology, cfg.sync_spin_ms)
        socket_sum = _socket_sum(store, topology, interface, timeout_s, spin_s)
    comm = TorchGroupComm(device, store, socket_sum)
    comm.time_sync_wait = cfg.time_sync_wait
    comm.ranks_per_node = topology.local_world_size
    return comm


def _uses_socket_sum(cpu_sum: str, backend: str, world_size: int) -> bool:
    """``comm.cpu_sum``: sockets for gloo groups of 2^k ranks unless gloo was asked for."""
    fits = backend == "gloo" and recursive_doubling_fits(world_size)
    if cpu_sum == "socket" and not fits:
        raise UserError(
            f"comm.cpu_sum=socket needs CPU ranks in a power-of-two group, not {world_size} "
            f"{backend} ranks; use comm.cpu_sum=auto or gloo",
            code="comm-socket-sum-ranks",
        )
    return fits and cpu_sum != "gloo"


def sync_spin_s(topology: Topology, requested_ms: float | None) -> float:
    """``comm.sync_spin_ms`` in seconds; unset: spin only while every rank of the node has a core."""
    if requested_ms is not None:
        return requested_ms / 1000.0
    return AUTO_SPIN_S if topology.local_world_size <= len(os.sched_getaffinity(0)) else 0.0


def _socket_sum(
    store: dist.Store, topology: Topology, interface: str | None, timeout_s: float, spin_s: float
) -> SocketSum:
    """Direct sockets for the sums of a power-of-two gloo group, on the collectives' interface."""
    host = (interface and interface_address(interface)) or "127.0.0.1"
    try:
        return SocketSum(store, topology.rank, topology.world_size, host, timeout_s, spin_s)
    except (OSError, RuntimeError) as exc:  # a peer gone between the group's start and this
        raise PeerFailure(
            f"rank {topology.rank}: could not connect to its peers' sum sockets from {host}; another "
            f"rank died or is unreachable ({exc})"
        ) from None


def _check_one_rank_per_gpu(store: dist.Store, topology: Topology, device: torch.device) -> None:
    """NCCL rejects two ranks on one GPU only at the first collective, with an opaque error:
    compare the GPUs' UUIDs through the store first and fail on every rank with one line."""
    store.set(f"gpu/{topology.rank}", str(torch.cuda.get_device_properties(device).uuid))
    owner: dict[str, int] = {}
    for rank in range(topology.world_size):
        uuid = store.get(f"gpu/{rank}").decode()
        if uuid in owner:
            raise UserError(
                f"ranks {owner[uuid]} and {rank} were given the same GPU (GPU-{uuid}); NCCL needs one "
                f"GPU per rank: start at most {torch.cuda.device_count()} processes per node "
                "(--nproc_per_node) or train on the CPU with --device cpu",
                code="launch-gpu-shared",
            )
        owner[uuid] = rank


def _make_store(topology: Topology, timeout: timedelta) -> dist.Store:
    """The key-value store ranks meet through: a shared file, or a TCP store on the master."""
    if topology.rendezvous_file is not None:
        store = dist.FileStore(topology.rendezvous_file, topology.world_size)
        store.set_timeout(timeout)
        return store
    return dist.TCPStore(
        topology.master_addr,
        topology.master_port,
        topology.world_size,
        is_master=topology.rank == 0 and not topology.agent_hosts_store,
        timeout=timeout,
    )
