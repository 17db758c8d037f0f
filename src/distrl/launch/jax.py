"""``python -m distrl.launch.jax``: start and supervise one node's JAX processes.

JAX does not start processes itself; run this on every node instead (one node needs no address)::

    python -m distrl.launch.jax --nnodes=N --nproc_per_node=P --node_rank=R \\
        --coordinator_address=HOST:PORT -m distrl.train --config ... --distributed --ml-framework jax

Everything from ``-m MODULE`` or the script path on goes to the workers verbatim. Each worker gets
skrl's variables JAX_RANK, JAX_LOCAL_RANK, JAX_WORLD_SIZE, JAX_COORDINATOR_ADDR and
JAX_COORDINATOR_PORT (so programs written for ``python -m skrl.utils.distributed.jax`` run unchanged)
plus the node layout: JAX_LOCAL_WORLD_SIZE, JAX_NODE_RANK and JAX_NUM_NODES (``discover_topology``
reads them all back). Unlike skrl's launcher, SIGINT and SIGTERM reach every worker, a failed worker
stops its siblings, and its exit code becomes the launcher's (``supervise.run_workers``). Mistakes
in the launcher's own options are one line and exit code 2.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from distrl.errors import UserError, exit_status
from distrl.launch.supervise import run_workers

PROG = "distrl.launch.jax"
DEFAULT_COORDINATOR_ADDRESS = "127.0.0.1:29650"
"""Used on one node; with several nodes ``--coordinator_address`` is required."""


@dataclass(frozen=True)
class JaxLaunch:
    """One node's share of a JAX job, as the launcher's options describe it."""

    num_nodes: int
    procs_per_node: int
    node_rank: int
    coordinator_host: str
    coordinator_port: int
    worker_argv: list[str]
    """The command every worker runs: ``python -m MODULE ARGS`` or ``python SCRIPT ARGS``."""

    @property
    def world_size(self) -> int:
        return self.num_nodes * self.procs_per_node


class _Parser(argparse.ArgumentParser):
    """argparse that raises ``UserError`` (one line, exit code 2) instead of printing its usage."""

    def error(self, message: str) -> NoReturn:
        raise UserError(message, code="launch-jax-usage")


def build_parser() -> argparse.ArgumentParser:
    # No abbreviations: a prefix such as --node would be ambiguous between the two spellings.
    parser = _Parser(prog=PROG, description=__doc__, allow_abbrev=False,
                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--nnodes", type=int, default=1, help="nodes taking part (default 1)")
    parser.add_argument(
        "--nproc_per_node", "--nproc-per-node", type=int, default=1, help="processes on this node"
    )
    parser.add_argument(
        "--node_rank", "--node-rank", type=int, default=0, help="this node's index, 0..nnodes-1"
    )
    parser.add_argument(
        "--coordinator_address",
        "--coordinator-address",
        help=f"HOST:PORT of node 0's JAX coordinator (default {DEFAULT_COORDINATOR_ADDRESS} on one node)",
    )
    parser.add_argument("-m", "--module", action="store_true", help="run PROGRAM as a module (python -m)")
    parser.add_argument("program", nargs="?", help="the module (with -m) or script every worker runs")
    parser.add_argument("program_args", nargs=argparse.REMAINDER, help="its arguments, passed verbatim")
    return parser


def parse_launch(argv: list[str]) -> JaxLaunch:
    """The launcher's command line -> ``JaxLaunch``; mistakes raise ``UserError``."""
    args = build_parser().parse_args(argv)
    if args.nnodes < 1:
        raise UserError(f"--nnodes {args.nnodes}: must be at least 1", code="launch-count-below-one")
    if args.nproc_per_node < 1:
        raise UserError(
            f"--nproc_per_node {args.nproc_per_node}: must be at least 1", code="launch-count-below-one"
        )
    if not 0 <= args.node_rank < args.nnodes:
        raise UserError(
            f"--node_rank {args.node_rank}: must be in 0..{args.nnodes - 1} for --nnodes {args.nnodes}",
            code="launch-node-index-out-of-range",
        )
    if args.coordinator_address is None and args.nnodes > 1:
        raise UserError(
            f"--nnodes {args.nnodes}: give --coordinator_address HOST:PORT, an address of node 0 "
            "that every node can reach",
            code="launch-jax-coordinator-missing",
        )
    host, port = _split_address(args.coordinator_address or DEFAULT_COORDINATOR_ADDRESS)
    if args.program is None:
        raise UserError(
            "no program to run: give -m MODULE [ARGS...] or SCRIPT [ARGS...]", code="launch-jax-no-program"
        )
    if args.module:
        worker_argv = [sys.executable, "-m", args.program, *args.program_args]
    elif Path(args.program).is_file():
        worker_argv = [sys.executable, args.program, *args.program_args]
    else:
        raise UserError(
            f"{args.program}: no such script (use -m for a module)", code="launch-jax-script-missing"
        )
    return JaxLaunch(args.nnodes, args.nproc_per_node, args.node_rank, host, port, worker_argv)


def _split_address(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    if not host:
        raise UserError(
            f"--coordinator_address {address!r}: expected HOST:PORT", code="launch-jax-coordinator-malformed"
        )
    try:
        port_number = int(port)
    except ValueError:
        raise UserError(
            f"--coordinator_address {address!r}: port {port!r} is not an integer",
            code="launch-jax-coordinator-malformed",
        ) from None
    if not 0 < port_number < 65536:
        raise UserError(
            f"--coordinator_address {address!r}: port {port_number} is not in 1..65535",
            code="launch-jax-coordinator-malformed",
        )
    return host, port_number


def worker_env(launch: JaxLaunch, local_rank: int, base_env: dict[str, str]) -> dict[str, str]:
    """``base_env`` plus the ``JAX_*`` variables of local process ``local_rank``; one thread per
    process (OMP_NUM_THREADS=1) unless ``base_env`` sets it."""
    return {
        **base_env,
        "JAX_RANK": str(launch.node_rank * launch.procs_per_node + local_rank),
        "JAX_LOCAL_RANK": str(local_rank),
        "JAX_WORLD_SIZE": str(launch.world_size),
        "JAX_LOCAL_WORLD_SIZE": str(launch.procs_per_node),
        "JAX_NODE_RANK": str(launch.node_rank),
        "JAX_NUM_NODES": str(launch.num_nodes),
        "JAX_COORDINATOR_ADDR": launch.coordinator_host,
        "JAX_COORDINATOR_PORT": str(launch.coordinator_port),
        "OMP_NUM_THREADS": base_env.get("OMP_NUM_THREADS", "1"),
    }


def main(argv: list[str] | None = None) -> int:
    """Parse, start this node's workers and supervise them; returns the launcher's exit code."""
    try:
        launch = parse_launch(sys.argv[1:] if argv is None else argv)
    except UserError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return exit_status(exc)
    envs = [worker_env(launch, local_rank, dict(os.environ)) for local_rank in range(launch.procs_per_node)]
    return run_workers(launch.worker_argv, envs, prog=PROG)


if __name__ == "__main__":
    sys.exit(main())
