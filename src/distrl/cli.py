"""``distrl`` command line: train and eval. User errors become one line and exit code 2."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import sys
from pathlib import Path
from typing import Any

from distrl.errors import PeerFailure, UserError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="distrl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train a policy (one process, torchrun or srun)")
    add_train_arguments(train)

    ev = sub.add_parser("eval", help="evaluate a checkpoint deterministically")
    ev.add_argument("--checkpoint", required=True, type=Path, help="checkpoint dir or run dir")
    ev.add_argument("--episodes", type=int, default=None, help="episodes (default: eval.episodes)")
    ev.add_argument("--seed", type=int, default=None, help="first episode seed (default: eval.seed)")
    ev.add_argument("--json", action="store_true", help="print one JSON object")
    return parser


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="YAML config file")
    parser.add_argument("--env", help="Gymnasium env id or module:Class (env.id)")
    parser.add_argument("--run-dir", type=Path, help="output dir (default: runs/<config name>)")
    parser.add_argument("--seed", type=int, help="train.seed")
    parser.add_argument("--total-steps", type=int, help="env steps summed over all ranks")
    parser.add_argument("--num-envs", type=int, help="envs summed over all ranks (env.num_envs)")
    parser.add_argument("--device", help="auto, cpu, cuda or cuda:N (train.device)")
    parser.add_argument("--network-interface", help="interface for collectives (train.network_interface)")
    parser.add_argument("--resume", action="store_true", help="continue from the newest checkpoint")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run in --run-dir")
    parser.add_argument(
        "--distributed", action="store_true", help="require torchrun/srun variables (fail without)"
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="join the group, print every rank's topology, build nothing"
    )
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
        "train.device": args.device,
        "train.network_interface": args.network_interface,
    }
    # Quote strings so YAML reads "pkg.mod:Cls" or "cuda:0" as text, never as a mapping.
    return [f"{k}={json.dumps(v)}" for k, v in flags.items() if v is not None]


def default_run_dir(args: argparse.Namespace, env_id: str) -> Path:
    name = args.config.stem if args.config else re.sub(r"[^A-Za-z0-9_.-]+", "_", env_id)
    return Path("runs") / name


def command_launch_node(args: argparse.Namespace, train_argv: list[str]) -> int:
    from distrl.launch.file_rendezvous import launch_node, procs_for_node

    if args.node_index is None or args.rendezvous_file is None:
        raise UserError("--num-nodes needs --node-index and --rendezvous-file")
    procs = procs_for_node(args.procs_per_node, args.use_all_available_devices)
    return launch_node(train_argv, args.num_nodes, args.node_index, args.rendezvous_file, procs)


def command_train(args: argparse.Namespace) -> int:
    import torch

    from distrl.config import load_config
    from distrl.envs import check_env
    from distrl.io import checkpoint as ckpt
    from distrl.launch import connect, discover_topology, resolve_device
    from distrl.launch.preemption import PREEMPTED_EXIT_CODE, requeue_slurm_job
    from distrl.runners.on_policy import OnPolicyRunner, Preempted

    if args.resume and args.overwrite:
        raise UserError("--resume and --overwrite exclude each other")
    for arg in args.overrides:
        if "=" not in arg:
            raise UserError(f"unexpected argument {arg!r}: overrides look like dotted.key=value")
    cfg = load_config(args.config, [*args.overrides, *_flag_overrides(args)])
    topology = discover_topology(require_launcher=args.distributed)
    device = resolve_device(cfg.train.device, topology)
    torch.set_num_threads(cfg.train.torch_threads)
    # Annealed learning rates drive Adam's moments towards denormals, which are slow on CPUs.
    torch.set_flush_denormal(True)
    if args.dry_run:
        return _dry_run(cfg, topology, device)
    check_env(cfg.env)
    run_dir = args.run_dir or default_run_dir(args, cfg.env.id)
    # A job restarted by torchrun --max-restarts or a SLURM requeue resumes by itself.
    resume = args.resume or topology.restart_count > 0

    comm = connect(topology, device, cfg.train.timeout_s, cfg.train.network_interface, cfg.train.sync_spin_ms)
    try:
        payload = comm.run_on_main(lambda: _prepare_run_dir(run_dir, args, cfg, resume))
        runner = OnPolicyRunner(cfg, comm, device, run_dir, ckpt.unpack(payload) if payload else None)
        try:
            row = runner.learn()
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
    from distrl.envs.sharding import shard_envs
    from distrl.launch import connect
    from distrl.seeding import env_seeds

    comm = connect(topology, device, cfg.train.timeout_s, cfg.train.network_interface, cfg.train.sync_spin_ms)
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


def _prepare_run_dir(run_dir: Path, args: argparse.Namespace, cfg: Any, resume: bool) -> bytes:
    """On rank 0: refuse to clobber another run, write config.yaml, load the resume checkpoint
    (packed; empty when starting fresh)."""
    import yaml

    from distrl.config import config_to_dict
    from distrl.io import checkpoint as ckpt

    existing = ckpt.list_checkpoints(run_dir / "checkpoints")
    payload = b""
    if resume and existing:
        payload = ckpt.pack(_newest_valid_checkpoint(existing, cfg))
    elif args.resume:
        raise UserError(f"--resume: no checkpoint in {run_dir / 'checkpoints'}")
    elif existing and not args.overwrite:
        raise UserError(
            f"run dir {run_dir} already holds a run; pass --resume to continue it "
            "or --overwrite to replace it"
        )
    try:
        if args.overwrite and run_dir.exists():
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config_to_dict(cfg), sort_keys=False))
    except OSError as exc:
        raise UserError(f"cannot write run dir {run_dir}: {exc.strerror or exc}") from None
    return payload


# A resumed run must rebuild the same tensors: these keys may not change between launches.
_RESUME_FIXED_KEYS = (
    "env.id",
    "model.hidden_sizes",
    "model.activation",
    "normalize.observations",
    "normalize.rewards",
)


def _newest_valid_checkpoint(checkpoints: list[Path], cfg: Any) -> dict[str, bytes]:
    """Newest checkpoint that passes its checksums; corrupt ones are reported and skipped."""
    from distrl.config import config_to_dict
    from distrl.io import checkpoint as ckpt

    for path in reversed(checkpoints):
        try:
            files = ckpt.load_checkpoint(path)
        except UserError as exc:
            print(f"distrl: warning: skipping checkpoint {path}: {exc}", file=sys.stderr)
            continue
        saved = json.loads(files["state.json"])["config"]
        current = config_to_dict(cfg)
        for key in _RESUME_FIXED_KEYS:
            was, now = _dotted(saved, key), _dotted(current, key)
            if was != now:
                raise UserError(
                    f"checkpoint {path} was trained with {key}={was!r} but this config has {now!r}; "
                    "resuming needs the same env and network (use a new --run-dir to start over)"
                )
        print(f"distrl: resuming from {path}", file=sys.stderr)
        return files
    raise UserError(f"no valid checkpoint in {checkpoints[0].parent}: all {len(checkpoints)} are corrupt")


def _dotted(data: dict[str, Any], key: str) -> Any:
    for part in key.split("."):
        data = data[part]
    return data


def command_eval(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    from distrl.evaluate import evaluate, load_policy

    torch.set_num_threads(1)  # tiny networks: extra threads only add synchronisation
    loaded = load_policy(args.checkpoint)
    episodes = args.episodes if args.episodes is not None else loaded.cfg.eval.episodes
    if episodes < 1:
        raise UserError(f"--episodes {episodes}: must be at least 1")
    seed = args.seed if args.seed is not None else loaded.cfg.eval.seed
    returns = evaluate(loaded.cfg, loaded.policy, loaded.obs_rms, episodes, seed)
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


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # Overrides may sit between flags (`--seed 3 a.b=1 --resume c.d=2`): collect the strays.
    args, extra = parser.parse_known_args(argv)
    unknown = [a for a in extra if a.startswith("-") or args.command != "train"]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command == "train":
        args.overrides = [*args.overrides, *extra]
    raw = list(sys.argv[1:] if argv is None else argv)
    try:
        if args.command == "train" and args.num_nodes is not None:
            return command_launch_node(args, raw[1:])
        return command_train(args) if args.command == "train" else command_eval(args)
    except UserError as exc:
        print(f"distrl: error: {exc}", file=sys.stderr)
        return 2
    except PeerFailure as exc:
        print(f"distrl: error: {exc}", file=sys.stderr)
        return 3


if __name__ == "__main__":
    sys.exit(main())
