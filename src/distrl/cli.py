"""``distrl`` command line: a table of subcommands (``SUBCOMMANDS``). User errors become one line and
exit code 2; a failed collective (another rank died or hung) exit code 3."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from distrl.errors import CollectiveMismatch, PeerFailure, UserError


@dataclass(frozen=True)
class Subcommand:
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    takes_overrides: bool = False
    """Stray ``key=value`` arguments are config overrides (anywhere on the line)."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="distrl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, command in SUBCOMMANDS.items():
        command.add_arguments(sub.add_parser(name, help=command.help))
    return parser


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, type=Path, help="checkpoint dir or run dir")
    parser.add_argument("--episodes", type=int, default=None, help="episodes (default: eval.episodes)")
    parser.add_argument("--seed", type=int, default=None, help="first episode seed (default: eval.seed)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="YAML config file")
    parser.add_argument("--env", help="Gymnasium env id or module:Class (env.id)")
    parser.add_argument("--run-dir", type=Path, help="output dir (default: runs/<config name>)")
    parser.add_argument("--seed", type=int, help="train.seed")
    parser.add_argument("--total-steps", type=int, help="env steps summed over all ranks")
    parser.add_argument("--num-envs", type=int, help="envs summed over all ranks (env.num_envs)")
    parser.add_argument("--data", help="learn from this logged dataset (data.path) instead of envs")
    parser.add_argument("--device", help="auto, cpu, cuda or cuda:N (train.device)")
    parser.add_argument(
        "--ml-framework", choices=["torch", "jax"], help="the learner's framework (ml_framework)"
    )
    parser.add_argument("--network-interface", help="interface for collectives (comm.network_interface)")
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run in --run-dir")
    parser.add_argument(
        "--distributed", action="store_true", help="require torchrun/srun variables (fail without)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="join the group, print every rank's topology, build nothing"
    )
    parser.add_argument(
        "--profile", type=int, metavar="N", help="torch.profiler traces of N updates into <run dir>/profile/"
    )
    ray = parser.add_argument_group("Ray mode (the config's cluster: and workers: sections)")
    ray.add_argument("--launcher", choices=["ray"], help="run the learners as Ray actors")
    ray.add_argument(
        "--ray-address",
        help="join this Ray cluster (auto or HOST:PORT); default: $RAY_ADDRESS if set, else start one",
    )
    ray.add_argument("--namespace", default="distrl", help="Ray namespace of the job's actors")
    node = parser.add_argument_group("shared-file rendezvous (run the same command on every node)")
    node.add_argument("--num-nodes", type=int, help="nodes taking part")
    node.add_argument("--node-index", type=int, help="this node's index, 0..num-nodes-1 (0 saves)")
    node.add_argument("--rendezvous-file", type=Path, help="a file path every node can open (shared FS)")
    node.add_argument("--procs-per-node", type=int, help="training processes on this node (default 1)")
    node.add_argument("--use-all-available-devices", action="store_true", help="one process per visible GPU")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="dotted config overrides")


def _flag_overrides(args: argparse.Namespace) -> list[str]:
    flags = {
        "env.id": args.env,
        "train.seed": args.seed,
        "train.total_steps": args.total_steps,
        "env.num_envs": args.num_envs,
        "data.path": args.data,
        "train.device": args.device,
        "ml_framework": args.ml_framework,
        "comm.network_interface": args.network_interface,
        "log.profile_updates": args.profile,
    }
    # Quote strings so YAML reads "pkg.mod:Cls" or "cuda:0" as text, never as a mapping.
    return [f"{k}={json.dumps(v)}" for k, v in flags.items() if v is not None]


def default_run_dir(args: argparse.Namespace, env_id: str) -> Path:
    name = args.config.stem if args.config else re.sub(r"[^A-Za-z0-9_.-]+", "_", env_id)
    return Path("runs") / name


def command_train(args: argparse.Namespace) -> int:
    """``--num-nodes`` starts this node's processes (file rendezvous); otherwise this process trains."""
    if args.num_nodes is not None:
        return command_launch_node(args)
    if args.launcher == "ray":
        return command_launch_ray(args)
    return command_train_process(args)


def check_resume_flags(args: argparse.Namespace) -> None:
    if args.resume and args.overwrite:
        raise UserError("--resume and --overwrite exclude each other")


def command_launch_ray(args: argparse.Namespace) -> int:
    from distrl.config import load_config
    from distrl.launch.file_rendezvous import worker_argv
    from distrl.launch.ray_launch import launch

    check_resume_flags(args)
    cfg = load_config(args.config, [*args.overrides, *_flag_overrides(args)])
    # The driver and every learner agree on one absolute run dir, wherever Ray starts them.
    run_dir = (args.run_dir or default_run_dir(args, cfg.env.id)).resolve()
    argv = [*worker_argv(args.argv, {"--run-dir": True}), "--run-dir", str(run_dir)]
    # Ray's own convention: a cluster named by RAY_ADDRESS is the one to join.
    address = args.ray_address or os.environ.get("RAY_ADDRESS") or None
    return launch(argv, cfg, address, args.namespace, run_dir, args.overwrite)


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ray-address", help="the Ray cluster (auto, the default, or HOST:PORT)")
    parser.add_argument(
        "--run-dir", type=Path, help="the run dir of a job that started its own local Ray instance"
    )
    parser.add_argument("--namespace", default="distrl", help="Ray namespace of the jobs' actors")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def command_status(args: argparse.Namespace) -> int:
    from distrl.launch.ray_launch import local_job_cluster, status

    if args.run_dir is None:
        return status(args.ray_address or "auto", args.namespace, args.json)
    if args.ray_address is not None:
        raise UserError("--run-dir and --ray-address exclude each other: give one")
    address, namespace = local_job_cluster(args.run_dir)
    return status(address, namespace, args.json)


def command_launch_node(args: argparse.Namespace) -> int:
    from distrl.launch.file_rendezvous import launch_node, procs_for_node

    if args.node_index is None or args.rendezvous_file is None:
        raise UserError("--num-nodes needs --node-index and --rendezvous-file")
    procs = procs_for_node(args.procs_per_node, args.use_all_available_devices)
    return launch_node(args.argv, args.num_nodes, args.node_index, args.rendezvous_file, procs)


def command_train_process(args: argparse.Namespace) -> int:
    import torch

    from distrl.allocator import keep_freed_memory
    from distrl.config import load_config
    from distrl.envs import check_env
    from distrl.io import checkpoint as ckpt
    from distrl.io.run_dir import prepare_run_dir
    from distrl.launch.preemption import PREEMPTED_EXIT_CODE, requeue_slurm_job
    from distrl.launch.process_group import connect, resolve_device
    from distrl.launch.ray_workers import from_launcher as workers_from_launcher
    from distrl.launch.topology import discover_topology
    from distrl.runners import build_training
    from distrl.runners.loop import Preempted

    check_resume_flags(args)
    for arg in args.overrides:
        if "=" not in arg:
            raise UserError(f"unexpected argument {arg!r}: overrides look like dotted.key=value")
    cfg = load_config(args.config, [*args.overrides, *_flag_overrides(args)])
    topology = discover_topology(require_launcher=args.distributed)
    device = resolve_device(cfg.train.device, topology)
    torch.set_num_threads(cfg.train.torch_threads)
    keep_freed_memory()
    # Annealed learning rates drive Adam's moments towards denormals, which are slow on CPUs.
    torch.set_flush_denormal(True)
    if args.dry_run:
        return _dry_run(cfg, topology, device)
    run_dir = args.run_dir or default_run_dir(args, cfg.env.id)
    # A job restarted by torchrun --max-restarts or a SLURM requeue resumes by itself.
    resume = args.resume or topology.restart_count > 0

    if cfg.ml_framework == "jax":
        from distrl.launch.jax_group import connect_jax

        # Before the env check: building a gymnax or Brax env starts JAX; jax.distributed comes first.
        comm = connect_jax(topology, cfg.comm.timeout_s)
        check_env(cfg.env)
    else:
        check_env(cfg.env)
        comm = connect(topology, device, cfg.comm)
    try:
        payload = comm.run_on_main(
            lambda: prepare_run_dir(run_dir, cfg, resume, must_resume=args.resume, overwrite=args.overwrite)
        )
        checkpoint = ckpt.unpack(payload) if payload else None
        loop = build_training(
            cfg,
            comm,
            device,
            run_dir,
            checkpoint,
            topology.node_rank,
            workers_from_launcher(),
            topology.restart_count,
        )
        try:
            row = loop.run()
        except Preempted as exc:
            comm.barrier()  # every rank raised at the same agreed step
            if comm.is_main:
                print(f"distrl: {exc} in {run_dir}", file=sys.stderr)
                requeued = requeue_slurm_job()
                if requeued:
                    print(f"distrl: {requeued}", file=sys.stderr)
            return PREEMPTED_EXIT_CODE
        # Leave together: a rank tearing gloo down while rank 0 still writes the final
        # checkpoint was seen to abort at exit (SIGABRT) and fail the whole launch.
        comm.barrier()
    finally:
        comm.close()
    if comm.is_main:
        ret = row.get("episode_return_mean", float("nan"))
        print(
            f"distrl: trained {row.get('global_step', 0)} env steps on {comm.world_size} rank(s) "
            f"in {row.get('time_s', 0.0):.1f}s, recent episode return {ret:.1f}; run dir {run_dir}"
        )
    return 0


def _dry_run(cfg: Any, topology: Any, device: Any) -> int:
    """Rendezvous for real (so addresses and ports are checked), then rank 0 prints what every
    rank sees; no env, model or run dir is created."""
    from distrl.launch.process_group import connect
    from distrl.seeding import env_seeds
    from distrl.sharding import shard_envs

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
    if not comm.is_main:
        return 0
    for row in ranks:
        seeds = row["env_seeds"]
        print(
            f"rank {row['rank']}/{row['world_size']} local {row['local_rank']} node {row['node_rank']} "
            f"host {row['host']} device {row['device']} backend {row['backend']} master {row['master']} "
            f"interface {row['interface']} "
            f"launcher {row['launcher']} envs {len(seeds)} seeds {seeds[0]}..{seeds[-1]}"
        )
    print(f"distrl: dry run ok: {len(ranks)} rank(s) joined")
    return 0


def command_eval(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    from distrl.evaluate import evaluate, load_policy
    from distrl.models.parametric_q_network import ParametricGreedyPolicy

    torch.set_num_threads(1)  # tiny networks: extra threads only add synchronisation
    loaded = load_policy(args.checkpoint)
    if isinstance(loaded.policy, ParametricGreedyPolicy):
        raise UserError(
            f"checkpoint {loaded.checkpoint} holds a parametric-action policy, which chooses among "
            "candidate sets no env offers; it has no online evaluation"
        )
    episodes = args.episodes if args.episodes is not None else loaded.cfg.eval.episodes
    if episodes < 1:
        raise UserError(f"--episodes {episodes}: must be at least 1")
    seed = args.seed if args.seed is not None else loaded.cfg.eval.seed
    returns = evaluate(loaded.cfg, loaded.policy, episodes, seed)
    result = {
        "return_mean": float(np.mean(returns)),
        "return_std": float(np.std(returns)),
        "episodes": episodes,
        "returns": returns,
        "env": loaded.cfg.env.id,
        "checkpoint": str(loaded.checkpoint),
        "global_step": loaded.global_step,
    }
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"{result['env']}: return {result['return_mean']:.1f} +- {result['return_std']:.1f} "
            f"over {episodes} deterministic episodes ({loaded.checkpoint})"
        )
    return 0


def add_collect_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", required=True, help="discrete-action Gymnasium env id or module:Class")
    parser.add_argument(
        "--policy",
        default="random",
        help="random | epsilon-greedy:CHECKPOINT:EPS | checkpoint:CHECKPOINT (default random)",
    )
    parser.add_argument("--steps", required=True, type=int, help="transitions to log")
    parser.add_argument("--out", required=True, type=Path, help="new (or empty) dataset directory")
    parser.add_argument("--rows-per-file", type=int, default=10_000, help="rows per Parquet file")
    parser.add_argument("--num-envs", type=int, default=8, help="envs stepped side by side")
    parser.add_argument("--seed", type=int, default=1, help="env i is seeded seed + i; actions too")


def command_collect(args: argparse.Namespace) -> int:
    from distrl.config import EnvConfig
    from distrl.data.collect import collect_dataset
    from distrl.envs import check_env

    for flag, value in (
        ("--steps", args.steps),
        ("--rows-per-file", args.rows_per_file),
        ("--num-envs", args.num_envs),
    ):
        if value < 1:
            raise UserError(f"{flag} {value}: must be at least 1")
    env_cfg = EnvConfig(id=args.env, num_envs=args.num_envs)
    check_env(env_cfg)
    files = collect_dataset(env_cfg, args.policy, args.steps, args.out, args.rows_per_file, args.seed)
    print(f"distrl: wrote {args.steps} transitions of {args.env} in {files} file(s) to {args.out}")
    return 0


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--checkpoint", required=True, type=Path, help="checkpoint dir or run dir")
    parser.add_argument("--format", required=True, choices=["torchscript", "onnx"], help="file format")
    parser.add_argument("--out", required=True, type=Path, help="file to write")


def command_export(args: argparse.Namespace) -> int:
    from distrl.evaluate import load_policy
    from distrl.io.export import export_policy

    loaded = load_policy(args.checkpoint)
    export_policy(loaded.policy, loaded.obs_dim, args.format, args.out)
    print(
        f"distrl: exported the {loaded.algorithm} policy of {loaded.checkpoint} to {args.out} ({args.format})"
    )
    return 0


def add_evaluate_offline_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoint", required=True, type=Path, help="checkpoint dir or run dir of a dqn run"
    )
    parser.add_argument(
        "--data", required=True, type=Path, help="logged dataset dir (distrl collect's Parquet)"
    )
    parser.add_argument("--bootstrap", type=int, default=200, help="bootstrap resamples per interval")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap resampling")
    parser.add_argument(
        "--max-rows",
        type=int,
        help="evaluate on the first whole episodes up to this many rows (reading no further); default all",
    )
    parser.add_argument("--json", action="store_true", help="print one strict JSON object (null for NaN)")


def command_evaluate_offline(args: argparse.Namespace) -> int:
    import torch

    from distrl.ope.dqn import evaluate_checkpoint_offline, print_report, report_json
    from distrl.ope.estimators import Bootstrap

    torch.set_num_threads(1)  # tiny networks: extra threads only add synchronisation
    if args.bootstrap < 1:
        raise UserError(f"--bootstrap {args.bootstrap}: must be at least 1")
    if args.max_rows is not None and args.max_rows < 1:
        raise UserError(f"--max-rows {args.max_rows}: must be at least 1")
    bootstrap = Bootstrap(resamples=args.bootstrap, seed=args.seed)
    report = evaluate_checkpoint_offline(args.checkpoint, args.data, bootstrap, args.max_rows)
    if args.json:
        print(report_json(report))
    else:
        print_report(report, bootstrap.confidence)
    return 0


def add_plot_arguments(parser: argparse.ArgumentParser) -> None:
    from distrl.io.plot import X_AXES

    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR", help="runs to draw")
    parser.add_argument("--metric", default="episode_return_mean", help="metrics.jsonl key to draw")
    parser.add_argument("--x", default="global_step", choices=X_AXES, help="x axis")
    parser.add_argument("--out", required=True, type=Path, help="PNG file to write")


def command_plot(args: argparse.Namespace) -> int:
    from distrl.io.plot import plot_runs

    lines = plot_runs(args.run_dirs, args.metric, args.x, args.out)
    print(f"distrl: drew {args.metric} of {len(args.run_dirs)} run(s) as {lines} line(s) in {args.out}")
    return 0


SUBCOMMANDS: dict[str, Subcommand] = {
    "train": Subcommand(
        "train a policy (one process, torchrun, srun or file rendezvous)",
        add_train_arguments,
        command_train,
        takes_overrides=True,
    ),
    "eval": Subcommand("evaluate a checkpoint deterministically", add_eval_arguments, command_eval),
    "status": Subcommand(
        "a Ray cluster's resources and its distrl jobs' workers: state, restarts, CPU, memory, work",
        add_status_arguments,
        command_status,
    ),
    "collect": Subcommand(
        "log transitions of a discrete-action env to Parquet (ReAgent's columns)",
        add_collect_arguments,
        command_collect,
    ),
    "export": Subcommand(
        "write a checkpoint's deterministic policy as one TorchScript or ONNX file",
        add_export_arguments,
        command_export,
    ),
    "plot": Subcommand(
        "draw learning curves from run dirs (seeds of one config: mean and min-max band)",
        add_plot_arguments,
        command_plot,
    ),
    "evaluate-offline": Subcommand(
        "estimate a dqn checkpoint's value from logged data (IPS, DM, DR, SDR, WDR)",
        add_evaluate_offline_arguments,
        command_evaluate_offline,
    ),
}


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # Overrides may sit between flags (`--seed 3 a.b=1 --resume c.d=2`): collect the strays.
    args, extra = parser.parse_known_args(argv)
    command = SUBCOMMANDS[args.command]
    unknown = [a for a in extra if a.startswith("-") or not command.takes_overrides]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if command.takes_overrides:
        args.overrides = [*args.overrides, *extra]
    # The subcommand's own arguments as given: a node launcher hands them to its processes.
    args.argv = list(sys.argv[1:] if argv is None else argv)[1:]
    try:
        return command.run(args)
    except UserError as exc:
        print(f"distrl: error: {exc}", file=sys.stderr)
        return 2
    except (PeerFailure, CollectiveMismatch) as exc:
        print(f"distrl: error: {exc}", file=sys.stderr)
        return 3


def run(argv: list[str] | None = None) -> NoReturn:
    """The process entry (console script, ``python -m distrl``, ``python -m distrl.train``): ``main``,
    then exit without the interpreter's teardown. A gloo worker thread may still be releasing the
    last collective's tensors when teardown starts; it then needs the GIL, which finalisation no
    longer gives, and the process aborts (SIGABRT) after a successful run, which torchrun counts
    as a failure. Everything distrl writes is closed by then; stdio and logging are flushed here."""
    code = main(argv)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
