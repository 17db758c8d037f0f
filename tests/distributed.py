"""Run a function on N real processes joined in a gloo process group (127.0.0.1 only).

The processes are forked from multiprocessing's forkserver, a clean process (not pytest) that has
imported torch and distrl once (``PRELOADED``): each rank is still a fresh process of its own,
without paying a second or two of imports."""

from __future__ import annotations

import contextlib
import functools
import itertools
import multiprocessing as mp
import os
import socket
import sys
from collections.abc import Callable, Iterator
from typing import Any

from distrl.launch.process_group import connect
from distrl.launch.topology import Topology

PRELOADED = ["torch", "gymnasium", "distrl.launch.process_group", "distrl.config.run", "distrl.runners.loop"]
"""What the forkserver imports before forking ranks: what nearly every rank imports."""
_CONTEXT = mp.get_context("forkserver")
_CONTEXT.set_forkserver_preload(PRELOADED)


PORTS_PER_WORKER = 1000
"""Under pytest-xdist each worker takes its ports from a range of its own, below Linux's ephemeral
range (32768-60999): a port one worker found free and has not bound yet is never another's."""


@functools.cache
def _worker_ports(worker: str) -> Iterator[int]:
    first = 20000 + int(worker.removeprefix("gw")) * PORTS_PER_WORKER
    return itertools.cycle(range(first, first + PORTS_PER_WORKER))


def free_port() -> int:
    """A port on 127.0.0.1 free now (nothing holds it until the caller binds it)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")  # gw0, gw1, ...; unset without xdist
    if worker is None:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            return sock.getsockname()[1]
    for port in itertools.islice(_worker_ports(worker), PORTS_PER_WORKER):
        with socket.socket() as sock, contextlib.suppress(OSError):
            sock.bind(("127.0.0.1", port))
            return port
    raise RuntimeError(f"no free port in xdist worker {worker}'s range")


def run_ranks(
    target: Callable[..., None], world_size: int, *args: Any, timeout_s: float = 120, cpu_sum: str = "auto"
) -> None:
    """Call ``target(comm, *args)`` on each rank; fail if any rank fails or hangs.
    ``cpu_sum``: the sum transport (``comm.cpu_sum``: auto, gloo or socket)."""
    port = free_port()
    procs = [
        _CONTEXT.Process(target=_rank_main, args=(target, rank, world_size, port, cpu_sum, args))
        for rank in range(world_size)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout_s)
    for p in procs:
        if p.is_alive():
            p.kill()
    codes = [p.exitcode for p in procs]
    assert codes == [0] * world_size, f"rank exit codes {codes}"


def _rank_main(
    target: Callable[..., None], rank: int, world_size: int, port: int, cpu_sum: str, args: tuple
) -> None:
    import torch

    from distrl.config.sections import CommConfig

    torch.set_num_threads(1)
    topology = Topology(
        launcher="test",
        rank=rank,
        local_rank=rank,
        world_size=world_size,
        local_world_size=world_size,
        master_port=port,
    )
    comm = connect(topology, torch.device("cpu"), CommConfig(timeout_s=60, cpu_sum=cpu_sum))
    try:
        target(comm, *args)
    finally:
        comm.close()
    # Leave as distrl's own entry point does (distrl.cli.run): without interpreter teardown, where
    # a gloo worker thread still releasing tensors aborts a process that succeeded.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
