"""Where this process sits among its peers, read from whichever launcher started it.

Launchers that start processes with variables are read here; Ray mode's driver hands each
learner its ``Topology`` as data instead (``distrl.ray.learners``). torchrun (and torch.distributed.run)
exports RANK/LOCAL_RANK/WORLD_SIZE/MASTER_ADDR/MASTER_PORT; distrl's file-rendezvous node launcher
DISTRL_RENDEZVOUS_FILE and DISTRL_RANK/...; distrl's JAX launcher (``python -m distrl.launch.jax``,
or skrl's, which uses the same names) JAX_RANK/JAX_LOCAL_RANK/JAX_WORLD_SIZE/JAX_COORDINATOR_ADDR/
JAX_COORDINATOR_PORT; SLURM's srun exports SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, SLURM_NODEID
and the job's node list. With none of them, the process runs alone and no process group is created.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from distrl.errors import UserError

_TORCHRUN_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
FILE_RENDEZVOUS_VARS = ("DISTRL_RENDEZVOUS_FILE", "DISTRL_RANK", "DISTRL_LOCAL_RANK", "DISTRL_WORLD_SIZE")
"""Set by ``distrl train --num-nodes N --node-index I --rendezvous-file F`` for the processes it spawns."""
JAX_VARS = ("JAX_RANK", "JAX_LOCAL_RANK", "JAX_WORLD_SIZE", "JAX_COORDINATOR_ADDR", "JAX_COORDINATOR_PORT")
"""Set by ``python -m distrl.launch.jax`` (and skrl's JAX launcher) for the processes it spawns."""
_SLURM_VARS = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_JOB_NODELIST")


@dataclass(frozen=True)
class Topology:
    """Rank layout of one training job."""

    launcher: str
    """``single``, ``torchrun``, ``file`` (file rendezvous), ``jax`` (the JAX launcher), ``slurm``
    or ``ray`` (Ray mode's learners)."""
    rank: int
    local_rank: int
    world_size: int
    local_world_size: int = 1
    """Ranks on this node."""
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    """Rank 0's host: the TCP store's (torchrun, SLURM) or the JAX coordinator's."""
    master_port: int = 29500
    restart_count: int = 0
    """Times this job was restarted (torchrun --max-restarts, or a requeued SLURM job); a
    restarted job resumes from its newest checkpoint by itself."""
    agent_hosts_store: bool = False
    """True when torchrun's agent already serves the TCP store on MASTER_PORT."""
    rendezvous_file: str | None = None
    """Shared file all ranks open to meet (ReAgent-style file rendezvous) instead of a TCP store."""
    num_nodes: int = 1
    """Nodes of a file-rendezvous or JAX-launcher job (the other launchers are routed by their
    master address)."""

    def torchrun_variables(self) -> dict[str, str]:
        """The variables torchrun would give this rank (what user code that reads them expects)."""
        return {
            "RANK": str(self.rank),
            "GROUP_RANK": str(self.node_rank),
            "LOCAL_RANK": str(self.local_rank),
            "WORLD_SIZE": str(self.world_size),
            "LOCAL_WORLD_SIZE": str(self.local_world_size),
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": str(self.master_port),
            "TORCHELASTIC_RESTART_COUNT": str(self.restart_count),
        }

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1 or self.launcher != "single"

    @property
    def is_main(self) -> bool:
        return self.rank == 0


SINGLE_PROCESS = Topology(launcher="single", rank=0, local_rank=0, world_size=1)


def discover_topology(env: Mapping[str, str] | None = None, require_launcher: bool = False) -> Topology:
    """Read the topology from the variables of the first of ``LAUNCHERS`` that started this
    process; one process alone without any."""
    env = os.environ if env is None else env
    for launcher in LAUNCHERS:
        if all(v in env for v in launcher.variables) and launcher.started_several(env):
            return launcher.topology(env)
    if require_launcher:
        starts = [
            f"{launcher.how} (sets {', '.join(launcher.variables)})" for launcher in LAUNCHERS if launcher.how
        ]
        raise UserError(
            "--distributed was given but no launcher variables were found: start with "
            f"{', '.join(starts[:-1])} or {starts[-1]}",
            code="launch-no-launcher-variables",
        )
    if "SLURM_RESTART_COUNT" in env:  # a requeued one-task SLURM job
        return replace(SINGLE_PROCESS, restart_count=_int_var(env, "SLURM_RESTART_COUNT"))
    return SINGLE_PROCESS


def _int_var(env: Mapping[str, str], name: str, default: int | None = None) -> int:
    """``env[name]`` as an integer; ``default`` when it is unset and a default is given."""
    if default is not None and name not in env:
        return default
    try:
        return int(env[name])
    except ValueError:
        raise UserError(
            f"environment variable {name}={env[name]!r} is not an integer", code="launch-env-var-not-integer"
        ) from None


def _from_torchrun(env: Mapping[str, str]) -> Topology:
    return Topology(
        launcher="torchrun",
        rank=_int_var(env, "RANK"),
        local_rank=_int_var(env, "LOCAL_RANK"),
        world_size=_int_var(env, "WORLD_SIZE"),
        local_world_size=_int_var(env, "LOCAL_WORLD_SIZE", 1),
        node_rank=_int_var(env, "GROUP_RANK", 0),
        master_addr=env["MASTER_ADDR"],
        master_port=_int_var(env, "MASTER_PORT"),
        restart_count=_int_var(env, "TORCHELASTIC_RESTART_COUNT", 0),
        agent_hosts_store=env.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true",
    )


def _from_file_rendezvous(env: Mapping[str, str]) -> Topology:
    num_nodes = _int_var(env, "DISTRL_NUM_NODES", 1)
    world_size = _int_var(env, "DISTRL_WORLD_SIZE")
    return Topology(
        launcher="file",
        rank=_int_var(env, "DISTRL_RANK"),
        local_rank=_int_var(env, "DISTRL_LOCAL_RANK"),
        world_size=world_size,
        local_world_size=world_size // num_nodes,  # the launcher starts as many on every node
        node_rank=_int_var(env, "DISTRL_NODE_RANK", 0),
        master_addr="",
        master_port=0,
        rendezvous_file=env["DISTRL_RENDEZVOUS_FILE"],
        num_nodes=num_nodes,
    )


def _from_jax(env: Mapping[str, str]) -> Topology:
    num_nodes = _int_var(env, "JAX_NUM_NODES", 1)
    world_size = _int_var(env, "JAX_WORLD_SIZE")
    return Topology(
        launcher="jax",
        rank=_int_var(env, "JAX_RANK"),
        local_rank=_int_var(env, "JAX_LOCAL_RANK"),
        world_size=world_size,
        local_world_size=_int_var(env, "JAX_LOCAL_WORLD_SIZE")
        if "JAX_LOCAL_WORLD_SIZE" in env
        else world_size // num_nodes,  # skrl's launcher sets neither: take one node
        node_rank=_int_var(env, "JAX_NODE_RANK", 0),
        master_addr=env["JAX_COORDINATOR_ADDR"],
        master_port=_int_var(env, "JAX_COORDINATOR_PORT"),
        num_nodes=num_nodes,
    )


def _from_slurm(env: Mapping[str, str]) -> Topology:
    nodes = expand_nodelist(env["SLURM_JOB_NODELIST"])
    if "MASTER_PORT" in env:
        port = _int_var(env, "MASTER_PORT")
    else:
        # Derive the port from the job id so concurrent jobs sharing a node do not collide.
        port = 20000 + _int_var(env, "SLURM_JOB_ID") % 20000 if "SLURM_JOB_ID" in env else 29500
    world_size = _int_var(env, "SLURM_NTASKS")
    return Topology(
        launcher="slurm",
        rank=_int_var(env, "SLURM_PROCID"),
        local_rank=_int_var(env, "SLURM_LOCALID"),
        world_size=world_size,
        local_world_size=-(-world_size // len(nodes)),  # the most tasks any node holds
        node_rank=_int_var(env, "SLURM_NODEID", 0),
        master_addr=env.get("MASTER_ADDR", nodes[0]),
        master_port=port,
        restart_count=_int_var(env, "SLURM_RESTART_COUNT", 0),
    )


@dataclass(frozen=True)
class Launcher:
    """A launcher that starts processes with variables: which, and how its topology reads."""

    variables: tuple[str, ...]
    """All set: this launcher started the process."""
    topology: Callable[[Mapping[str, str]], Topology]
    how: str = ""
    """How a user starts it (said when ``--distributed`` finds none); empty: distrl starts it."""
    started_several: Callable[[Mapping[str, str]], bool] = lambda env: True
    """It started more than this one process (a one-task SLURM job runs alone)."""


LAUNCHERS = (
    Launcher(
        _TORCHRUN_VARS,
        _from_torchrun,
        "`python -m torch.distributed.run --nproc_per_node=N -m distrl.train ...`",
    ),
    Launcher(FILE_RENDEZVOUS_VARS, _from_file_rendezvous),
    Launcher(JAX_VARS, _from_jax, "`python -m distrl.launch.jax` for JAX"),
    Launcher(_SLURM_VARS, _from_slurm, "srun", lambda env: int(env["SLURM_NTASKS"]) > 1),
)
"""The launchers read from variables, the first whose variables are all set winning: torchrun,
the file rendezvous and the JAX launcher win over SLURM, as they are often started inside a SLURM
allocation. A new launcher is a ``Launcher`` here (and its module under ``launch/``)."""


def expand_nodelist(nodelist: str) -> list[str]:
    """Expand SLURM's compressed host list, e.g. ``gpu[01-03,07],cpu5`` -> 5 host names.

    Uses ``scontrol show hostnames`` when it exists, else parses the format itself.
    """
    if shutil.which("scontrol"):
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=False
        )
        if out.returncode == 0 and out.stdout.strip():
            return out.stdout.split()
    hosts: list[str] = []
    for prefix, ranges, plain in re.findall(r"([^,\[]+)\[([^\]]+)\]|([^,\[\]]+)", nodelist):
        if plain:
            hosts.append(plain)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            if not hi:
                hosts.append(f"{prefix}{lo}")
                continue
            width = len(lo)
            hosts.extend(f"{prefix}{i:0{width}d}" for i in range(int(lo), int(hi) + 1))
    if not hosts:
        raise UserError(f"SLURM_JOB_NODELIST={nodelist!r} names no hosts", code="launch-slurm-nodelist-empty")
    return hosts
