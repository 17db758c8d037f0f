"""The one typed way into a training process: ``train_process``.

Whoever started the process hands it a validated config, the process's place among its peers
(a ``Topology``) and what to do with the run dir: the command line does (one process, torchrun,
SLURM, the file-rendezvous and JAX launchers' processes), and so does each of Ray mode's
learners, with the driver's config as data. Bad input is raised as ``UserError``, a failed
collective as ``PeerFailure``; the caller decides how to report them.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from distrl.algos.algorithm import LOGGED_DATA
from distrl.allocator import hand_back_freed_memory, keep_freed_memory
from distrl.collect.ahead import Schedule
from distrl.collect.processes import CollectorProcesses, check_collector_processes
from distrl.config.run_algorithm import check_inputs, learns_from, runner_class
from distrl.errors import UserError
from distrl.io import checkpoint as ckpt
from distrl.io.resume import ChosenCheckpoint, announcement, checkpoint_on_every_rank
from distrl.io.run_dir import prepare_run_dir
from distrl.io.train_state import launch_index
from distrl.launch.preemption import PREEMPTED_EXIT_CODE, PreemptionFlag, requeue_slurm_job
from distrl.launch.process_group import connect, resolve_device
from distrl.launch.run_dir import RunDir
from distrl.launch.topology import Topology
from distrl.learner_memory import check_sharding_layout, unsharded_note
from distrl.runners.base import RemoteWorkers, RunContext
from distrl.runners.loop import Preempted, TrainingLoop

if TYPE_CHECKING:
    from distrl.comm import Comm
    from distrl.config.run import RunConfig
    from distrl.config.sections import TrainConfig


def train_process(
    cfg: RunConfig, topology: Topology, run_dir: RunDir, workers: RemoteWorkers | None = None
) -> int:
    """Train this process's rank of the run (``run_training``) and print its last line; returns
    the exit status (0, or the preempted status)."""
    status, summary = run_training(cfg, topology, run_dir, workers)
    if summary:
        print(summary)
    return status


def run_training(
    cfg: RunConfig, topology: Topology, run_dir: RunDir, workers: RemoteWorkers | None = None
) -> tuple[int, str]:
    """Join the group, prepare or resume the run dir, run the training loop: (the exit status,
    and on the main rank the run's last line: what it trained and why it stopped; else "").
    ``workers``: the processes the launcher gives this rank for part of its work (Ray mode's
    worker groups, whose driver prints the line: an actor's own output may never reach it)."""
    device = _set_up_process(cfg, topology)
    comm = _connect(cfg, topology, device, ray_mode=workers is not None)
    try:
        resume = run_dir.resume or topology.restart_count > 0
        chosen: list[ChosenCheckpoint | None] = [None]  # rank 0's

        def prepare() -> bytes:
            chosen[0] = prepare_run_dir(
                run_dir.path, cfg, resume, must_resume=run_dir.resume, overwrite=run_dir.overwrite
            )
            return announcement(chosen[0])

        existed = run_dir.path.exists()
        checkpoint = checkpoint_on_every_rank(comm, comm.run_on_main(prepare), chosen[0])
        try:
            rank = (topology.node_rank, workers, topology.restart_count)
            loop = build_training(cfg, comm, device, run_dir.path, checkpoint, *rank)
        except UserError:
            if comm.is_main and not existed:  # refused before anything was written: leave nothing
                with contextlib.suppress(OSError):
                    run_dir.path.rmdir()
            raise
        try:
            row = loop.run()
        except Preempted as exc:
            comm.barrier()  # every rank raised at the same agreed step
            _report_preemption(comm, exc, run_dir.path)
            return PREEMPTED_EXIT_CODE, ""
        # Leave together: a rank tearing gloo down while rank 0 still writes the final
        # checkpoint was seen to abort at exit (SIGABRT) and fail the whole launch.
        comm.barrier()
    finally:
        comm.close()
    if not comm.is_main:
        return 0, ""
    summary = stop_summary(cfg, row, loop)
    return 0, f"distrl: {summary}; run dir {run_dir.path}"


def stop_summary(cfg: RunConfig, row: dict[str, Any], loop: TrainingLoop) -> str:
    """What this launch did and why it stopped: the evaluation check passed (with its result) or
    the step budget was reached (in whole iterations, where they are fixed); then the training
    episodes' recent return, if it had episodes. A resumed launch names its own steps (beside its
    own seconds) and the run's total."""
    unit = "logged transitions" if learns_from(cfg) == LOGGED_DATA else cfg.algo.step_unit
    launch_first_step = loop.launch_first_step
    total = row.get("global_step", launch_first_step)
    done = f"{total - launch_first_step} {unit}"
    if launch_first_step:
        done += f" in this launch (resumed at {launch_first_step}; {total} in the whole run)"
    steps = f"trained {done} on {row.get('ranks', 1)} rank(s) in {row.get('time_s', 0.0):.1f}s"
    budget = f"train.total_steps={cfg.train.total_steps}"
    if loop.planned_steps != cfg.train.total_steps:
        budget += f", in whole iterations of {loop.runner.steps_per_iteration:,} {unit}"
    if loop.stopped_by_check:
        why = (
            f"stopped: the evaluation check passed (mean return {row['stop_check_return']:.1f} "
            f">= train.stop_return={cfg.train.stop_return:g})"
        )
    else:
        why = f"stopped: the step budget ({budget}) was reached"
    recent = row.get("episode_return_mean", math.nan)
    if math.isnan(recent):  # learning from logged data, or no episode ended yet
        return f"{steps}; {why}"
    return f"{steps}; {why}; recent training episode return {recent:.1f}"


def build_training(
    cfg: RunConfig,
    comm: Comm,
    device: torch.device,
    run_dir: Path,
    checkpoint: ckpt.CheckpointFiles | None = None,
    node_rank: int = 0,
    workers: RemoteWorkers | None = None,
    restart_count: int = 0,
) -> TrainingLoop:
    """The config's runner (``algos.registry``) inside the shared loop, fresh or resumed from
    ``checkpoint``; ``node_rank``: the process's node; ``workers``: processes that do part of the
    rank's work; ``restart_count``: the launcher's restarts of the group so far."""
    context = RunContext(
        cfg, comm, device, launch_index(checkpoint), node_rank, workers or local_workers(cfg), restart_count
    )
    return TrainingLoop(context, runner_class(cfg)(context), run_dir, PreemptionFlag(), checkpoint)


def local_workers(cfg: RunConfig) -> RemoteWorkers:
    """A rank's workers without Ray: its collector processes (``collect.processes``), if any."""
    collect = cfg.collect
    if not collect.processes:
        return RemoteWorkers()
    processes = CollectorProcesses(collect.processes, Schedule.of(collect), collect.max_restarts)
    return RemoteWorkers(collector_processes=processes)


def _set_up_process(cfg: RunConfig, topology: Topology) -> torch.device:
    """The rank's device, and the process settings every training process runs with."""
    device = resolve_device(cfg.train.device, topology)
    apply_cuda_options(cfg.train, device, topology.rank)
    if (note := unsharded_note(cfg.train.sharding, topology.world_size)) is not None:
        print(f"distrl: {note}", file=sys.stderr)
    torch.set_num_threads(cfg.train.torch_threads)
    if cfg.train.sharding == "none":
        keep_freed_memory()
    else:  # FSDP's gather and scatter buffers, tens of MiB each, would fragment a heap keeping them
        hand_back_freed_memory()
    # Annealed learning rates drive Adam's moments towards denormals, which are slow on CPUs.
    torch.set_flush_denormal(True)
    return device


def apply_cuda_options(train: TrainConfig, device: torch.device, rank: int) -> None:
    """``train.cuda_memory_fraction`` on a CUDA device; on any other, one line (rank 0's) for each
    CUDA-only memory option set, saying it does nothing there."""
    if device.type == "cuda":
        if train.cuda_memory_fraction is not None:
            torch.cuda.set_per_process_memory_fraction(train.cuda_memory_fraction, device)
        return
    cuda_only = {
        "cuda_memory_fraction": train.cuda_memory_fraction,
        "optimizer_offload": train.optimizer_offload,
    }
    for key, value in cuda_only.items():
        if value not in (None, False) and rank == 0:
            shown = str(value).lower() if isinstance(value, bool) else value
            print(
                f"distrl: train.{key}={shown} applies to CUDA devices; this run is on {device.type}, "
                "where it does nothing",
                file=sys.stderr,
            )


def _connect(cfg: RunConfig, topology: Topology, device: torch.device, ray_mode: bool) -> Comm:
    """The rank's communicator, the env (and, without Ray, the collector processes) checked
    before any rank waits on the others."""
    if cfg.ml_framework == "jax":
        from distrl.launch.jax_group import connect_jax

        # Before the env check: building a gymnax or Brax env starts JAX; jax.distributed comes first.
        comm = connect_jax(topology, cfg.comm.timeout_s)
        check_inputs(cfg)
        check_collector_processes(cfg)
        return comm
    check_inputs(cfg)
    # Every rank alike, before the run dir: a refused layout leaves nothing behind.
    check_sharding_layout(cfg.train.sharding, topology.world_size, topology.local_world_size)
    if not ray_mode:  # the driver checked Ray mode's env workers
        check_collector_processes(cfg)
    offloaded_shards = cfg.train.sharding != "none" and cfg.train.optimizer_offload
    return connect(topology, device, cfg.comm, cpu_collectives=offloaded_shards)


def _report_preemption(comm: Comm, exc: Preempted, run_dir: Path) -> None:
    if comm.is_main:
        print(f"distrl: {exc} in {run_dir}", file=sys.stderr)
        requeued = requeue_slurm_job()
        if requeued:
            print(f"distrl: {requeued}", file=sys.stderr)


def dry_run(cfg: RunConfig, topology: Topology) -> int:
    """Rendezvous for real (so addresses and ports are checked), then rank 0 prints what every
    rank sees; no env, model or run dir is created."""
    from distrl.seeding import env_seeds
    from distrl.sharding import shard_envs

    device = _set_up_process(cfg, topology)
    comm = connect(topology, device, cfg.comm)
    try:
        mine = {
            "rank": comm.rank,
            "local_rank": topology.local_rank,
            "node_rank": topology.node_rank,
            "world_size": comm.world_size,
            "launcher": topology.launcher,
            "device": str(device),
            "backend": "nccl" if device.type == "cuda" else ("gloo" if comm.world_size > 1 else "none"),
            "master": f"{topology.master_addr}:{topology.master_port}",
            "interface": os.environ.get("GLOO_SOCKET_IFNAME", "-"),
            "host": socket.gethostname(),
            "env_seeds": env_seeds(cfg.train.seed, shard_envs(cfg.env, comm.rank, comm.world_size)),
        }
        ranks = [json.loads(b) for b in comm.all_gather_bytes(json.dumps(mine).encode())]
        comm.barrier()
    finally:
        comm.close()
    if comm.is_main:
        for row in ranks:
            _print_rank(row)
        print(f"distrl: dry run ok: {len(ranks)} rank(s) joined")
    return 0


def _print_rank(row: dict[str, Any]) -> None:
    seeds = row["env_seeds"]
    print(
        f"rank {row['rank']}/{row['world_size']} local {row['local_rank']} node {row['node_rank']} "
        f"host {row['host']} device {row['device']} backend {row['backend']} master {row['master']} "
        f"interface {row['interface']} "
        f"launcher {row['launcher']} envs {len(seeds)} seeds {seeds[0]}..{seeds[-1]}"
    )
