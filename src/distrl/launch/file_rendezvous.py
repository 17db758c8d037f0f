"""ReAgent-style multi-node launch: on every node run
``distrl train ... --num-nodes N --node-index I --rendezvous-file /shared/path [--procs-per-node P]``.

This process becomes the node's launcher: it starts P local training processes with the
``DISTRL_*`` variables of their global rank, and every process of every node meets the others
through the same file on a shared filesystem (torch's FileStore). Global rank 0, on node 0, writes
the run dir and the final model.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from distrl.errors import UserError
from distrl.launch.supervise import run_workers

LAUNCHER_FLAGS = {"--num-nodes": True, "--node-index": True, "--rendezvous-file": True,
                  "--procs-per-node": True, "--use-all-available-devices": False}  # fmt: skip
"""The node launcher's own flags (True: takes a value); they are not passed to the workers."""


def procs_for_node(procs_per_node: int | None, use_all_devices: bool) -> int:
    """Every visible GPU with --use-all-available-devices, else --procs-per-node (default 1)."""
    import torch  # here: the node launcher starts processes and needs no torch otherwise

    if use_all_devices and torch.cuda.is_available():
        return torch.cuda.device_count()
    return procs_per_node or 1


def worker_argv(argv: list[str]) -> list[str]:
    """``argv`` without the node launcher's own flags (``--flag value`` and ``--flag=value``
    forms)."""
    out, skip = [], False
    for token in argv:
        if skip:
            skip = False
            continue
        name = token.split("=", 1)[0]
        if name in LAUNCHER_FLAGS:
            skip = LAUNCHER_FLAGS[name] and "=" not in token
            continue
        out.append(token)
    return out


def launch_node(argv: list[str], num_nodes: int, node_index: int, rendezvous_file: Path, procs: int) -> int:
    """Start this node's ``procs`` ranks and supervise them (``supervise.run_workers``): if one
    fails, stop the others. Returns the first failing exit status, or 0."""
    if num_nodes < 1 or not 0 <= node_index < num_nodes:
        raise UserError(
            f"--node-index {node_index}: must be in 0..{num_nodes - 1} for --num-nodes {num_nodes}",
            code="launch-node-index-out-of-range",
        )
    if procs < 1:
        raise UserError(f"--procs-per-node {procs}: must be at least 1", code="launch-count-below-one")
    if not rendezvous_file.parent.is_dir():
        raise UserError(
            f"--rendezvous-file {rendezvous_file}: directory {rendezvous_file.parent} does not exist; "
            "create it, on a file system every node shares",
            code="launch-rendezvous-dir-missing",
        )
    world_size = num_nodes * procs
    envs = [
        {
            **os.environ,
            "DISTRL_RENDEZVOUS_FILE": str(rendezvous_file.resolve()),
            "DISTRL_RANK": str(node_index * procs + local_rank),
            "DISTRL_LOCAL_RANK": str(local_rank),
            "DISTRL_WORLD_SIZE": str(world_size),
            "DISTRL_NODE_RANK": str(node_index),
            "DISTRL_NUM_NODES": str(num_nodes),
            "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        }
        for local_rank in range(procs)
    ]
    return run_workers([sys.executable, "-m", "distrl.train", *worker_argv(argv)], envs, prog="distrl")
