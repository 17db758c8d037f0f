"""``distrl`` command line: a table of subcommands (``SUBCOMMANDS``). User errors become one line and
exit code 2; a failed collective (another rank died or hung) exit code 3."""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from distrl.errors import REPORTED, UserError, exit_status
from distrl.launch.run_dir import RunDir
from distrl.quiet import VERBOSE_ENV

if TYPE_CHECKING:
    from distrl.config.run import RunConfig

DESCRIPTION = """\
Train reinforcement-learning policies with one config on one process or many: torchrun, SLURM,
a shared-file rendezvous across nodes, Ray worker groups or JAX processes. Every rank steps its
own envs and keeps its own buffer; only gradients travel, and all ranks keep identical weights."""

EPILOG = """\
examples:
  distrl train --config configs/cartpole_ppo.yaml                  train in this process
  python -m torch.distributed.run --nproc_per_node=2 -m distrl.train \\
      --config configs/cartpole_ppo.yaml --distributed             the same run on 2 ranks
  distrl config configs/cartpole_ppo.yaml --ranks 4                 the resolved config, per-rank sizes
  distrl eval --checkpoint runs/cartpole_ppo                        evaluate the newest checkpoint

Run `distrl COMMAND --help` for a command's options and examples.
Exit codes: 0 done; 2 bad input, one line saying why; 3 another rank died or hung;
75 preempted (a checkpoint was written: run the same command again to resume)."""


@dataclass(frozen=True)
class Subcommand:
    help: str
    """One line in ``distrl --help``'s list."""
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    examples: tuple[tuple[str, str], ...]
    """(command, what it does) pairs shown under the subcommand's ``--help``."""
    takes_overrides: bool = False
    """Stray ``key=value`` arguments are config overrides (anywhere on the line)."""

    def epilog(self) -> str:
        lines = ["examples:"]
        for command, what in self.examples:
            lines += [f"  {command}", f"      {what}"]
        return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="distrl",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, command in SUBCOMMANDS.items():
        subparser = sub.add_parser(
            name,
            help=command.help,
            description=command.help[0].upper() + command.help[1:] + ".",
            epilog=command.epilog(),
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        command.add_arguments(subparser)
        subparser.add_argument(
            "--verbose", action="store_true", help="also show other libraries' progress lines and warnings"
        )
    return parser


def add_checkpoint_arguments(parser: argparse.ArgumentParser) -> None:
    """``--checkpoint`` and ``--best``: which checkpoint a command reads."""
    parser.add_argument("--checkpoint", required=True, type=Path, help="checkpoint dir or run dir")
    parser.add_argument(
        "--best",
        action="store_true",
        help="the run's checkpoint that scored best at its own checks (checkpoint.keep_best), not its newest",
    )


def add_eval_arguments(parser: argparse.ArgumentParser) -> None:
    add_checkpoint_arguments(parser)
    parser.add_argument("--episodes", type=int, default=None, help="episodes (default: eval.episodes)")
    parser.add_argument("--seed", type=int, default=None, help="first episode seed (default: eval.seed)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="YAML config file")
    parser.add_argument(
        "--env",
        "--task",
        dest="env",
        help="Gymnasium env id or module:Class (env.id; --task: Isaac Lab's name)",
    )
    parser.add_argument("--run-dir", type=Path, help="output dir (default: runs/<config name>)")
    parser.add_argument("--seed", type=int, help="train.seed")
    parser.add_argument("--total-steps", type=int, help="env steps summed over all ranks")
    parser.add_argument("--num-envs", type=int, help="envs summed over all ranks (env.num_envs)")
    parser.add_argument(
        "--num_envs",
        dest="num_envs_per_rank",
        type=int,
        help="envs on every rank, as Isaac Lab means it (env.num_envs_per_rank)",
    )
    parser.add_argument("--data", help="learn from this logged dataset (data.path) instead of envs")
    parser.add_argument("--device", help="auto, cpu, cuda or cuda:N (train.device)")
    parser.add_argument(
        "--ml-framework",
        "--ml_framework",
        choices=["torch", "jax"],
        help="the learner's framework (ml_framework)",
    )
    parser.add_argument(
        "--headless",
        action="store_true",
        help="accepted for Isaac Lab's command lines; distrl never opens windows",
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
        help="join this Ray cluster (auto or HOST:PORT); default: cluster.ray_address, else "
        "$RAY_ADDRESS if set, else start one",
    )
    ray.add_argument("--namespace", help="Ray namespace of the job's actors (default: cluster.namespace)")
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
        "env.num_envs_per_rank": args.num_envs_per_rank,
        "data.path": args.data,
        "train.device": args.device,
        "ml_framework": args.ml_framework,
        "comm.network_interface": args.network_interface,
        "log.profile_updates": args.profile,
    }
    # An env count given as a flag replaces the config's, whichever kind the config gives.
    cleared = []
    if args.num_envs is not None:
        cleared.append("env.num_envs_per_rank")
    if args.num_envs_per_rank is not None:
        cleared.append("env.num_envs")
    # Quote strings so YAML reads "pkg.mod:Cls" or "cuda:0" as text, never as a mapping.
    given = [f"{k}={json.dumps(v)}" for k, v in flags.items() if v is not None]
    return [f"{key}=null" for key in cleared] + given


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
        raise UserError("--resume and --overwrite exclude each other", code="cli-resume-and-overwrite")


def command_launch_ray(args: argparse.Namespace) -> int:
    from distrl.ray.driver import launch

    cfg = _train_config(args)
    # The driver and every learner agree on one absolute run dir, wherever Ray starts them.
    run_dir = (args.run_dir or default_run_dir(args, cfg.env.id)).resolve()
    # Ray's own convention: a cluster named by RAY_ADDRESS is the one to join.
    address = args.ray_address or cfg.cluster.ray_address or os.environ.get("RAY_ADDRESS") or None
    namespace = args.namespace or cfg.cluster.namespace
    return launch(cfg, address, namespace, RunDir(run_dir, args.resume, args.overwrite), args.dry_run)


def _train_config(args: argparse.Namespace) -> Any:
    """The validated config the train command's arguments give."""
    from distrl.config.run import load_config

    check_resume_flags(args)
    for arg in args.overrides:
        if "=" not in arg:
            raise UserError(
                f"unexpected argument {arg!r}: overrides look like dotted.key=value",
                code="cli-argument-unexpected",
            )
    if args.num_envs is not None and args.num_envs_per_rank is not None:
        raise UserError(
            "--num-envs (over all ranks) and --num_envs (per rank, Isaac Lab's) exclude each other",
            code="cli-num-envs-twice",
        )
    return load_config(args.config, [*args.overrides, *_flag_overrides(args)])


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", nargs="?", type=Path, help="YAML config file (default: all defaults)")
    parser.add_argument(
        "--ranks",
        type=int,
        help="share the sizes out over this many ranks (default: workers.policy, i.e. 1 unless a Ray "
        "config names more learners)",
    )
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="dotted config overrides")


def command_config(args: argparse.Namespace) -> int:
    import yaml

    from distrl.config.run import load_config

    args.config, args.overrides = _config_and_overrides(args.config, args.overrides)
    cfg = load_config(args.config, args.overrides)
    ranks = args.ranks if args.ranks is not None else cfg.workers.policy
    if ranks < 1:
        raise UserError(f"--ranks {ranks}: must be at least 1", code="cli-count-below-one")
    from distrl.learner_memory import check_sharding_layout, unsharded_note

    # What training would refuse or ignore, said here too (nodes: cluster.num_nodes, as Ray's).
    check_sharding_layout(cfg.train.sharding, ranks, math.ceil(ranks / cfg.cluster.num_nodes))
    if note := unsharded_note(cfg.train.sharding, ranks):
        print(f"distrl: {note}", file=sys.stderr)
    sizes = cfg.algo.sizes(cfg, ranks)
    print(f"# {args.config or 'the defaults'}{' with ' + ' '.join(args.overrides) if args.overrides else ''}")
    print(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False).rstrip())
    width = max(len(size.name) for size in sizes)
    print(f"# sizes of algo.name={cfg.algo.name} on {ranks} rank(s): the run's, then each rank's")
    for size in sizes:
        print(f"#   {size.name:<{width}}  {size.total:>9,}  {rank_shares(size.per_rank)}")
    from distrl.algos.registry import algorithm

    if algorithm(cfg.algo.name).learner_parameters and cfg.ml_framework == "torch":
        _print_learner_memory(cfg, ranks)
    return 0


def _print_learner_memory(cfg: RunConfig, ranks: int) -> None:
    """Each rank's bytes for the learner's weights, gradients and optimiser state under
    ``train.sharding`` (``learner_memory``); the model is counted, not built."""
    from distrl.algos.registry import algorithm, load
    from distrl.learner_memory import learner_bytes

    parameters = load(algorithm(cfg.algo.name).learner_parameters)(cfg)
    train = cfg.train
    frozen = f" (and {parameters.frozen:,} frozen)" if parameters.frozen else ""
    dtype = {2: "bfloat16", 4: "float32"}[parameters.gathered_bytes]
    gathered_in = f", gathered in {dtype}" if train.sharding != "none" else ""
    print(
        f"# memory of each rank's learner: {parameters.trained:,} parameters{frozen}, float32, "
        f"train.sharding={train.sharding}{gathered_in}"
    )
    held = train.hold_unsharded_gradients and train.gradient_accumulation_steps > 1
    figures = learner_bytes(parameters, train.sharding, ranks, cfg.cluster.num_nodes, held)
    width = max(len(name) for name in figures)
    for name, held in figures.items():
        print(f"#   {name:<{width}}  {held / 2**20:>12,.3f} MiB")


def _config_and_overrides(config: Path | None, overrides: list[str]) -> tuple[Path | None, list[str]]:
    """``distrl config a.b=1`` (no file): argparse took the first override for the file."""
    if config is not None and "=" in config.name:
        return None, [str(config), *overrides]
    return config, overrides


def rank_shares(per_rank: list[int]) -> str:
    """Runs of equal shares: ``ranks 0-1: 11, rank 2: 10``, or ``each rank: 8``."""
    if len(set(per_rank)) == 1:
        return f"each rank: {per_rank[0]:,}"
    runs: list[tuple[int, int, int]] = []  # (first rank, last rank, share)
    for rank, share in enumerate(per_rank):
        if runs and runs[-1][2] == share:
            runs[-1] = (runs[-1][0], rank, share)
        else:
            runs.append((rank, rank, share))
    return ", ".join(
        f"rank {first}: {share:,}" if first == last else f"ranks {first}-{last}: {share:,}"
        for first, last, share in runs
    )


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ray-address", help="the Ray cluster (auto, the default, or HOST:PORT)")
    parser.add_argument(
        "--run-dir", type=Path, help="the run dir of a job that started its own local Ray instance"
    )
    parser.add_argument("--namespace", default="distrl", help="Ray namespace of the jobs' actors")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def command_status(args: argparse.Namespace) -> int:
    from distrl.ray.cluster import local_job_cluster
    from distrl.ray.status import status

    if args.run_dir is None:
        return status(args.ray_address or "auto", args.namespace, args.json)
    if args.ray_address is not None:
        raise UserError(
            "--run-dir and --ray-address exclude each other: give one", code="cli-run-dir-and-ray-address"
        )
    address, namespace = local_job_cluster(args.run_dir)
    return status(address, namespace, args.json)


def command_launch_node(args: argparse.Namespace) -> int:
    from distrl.launch.file_rendezvous import launch_node, procs_for_node

    if args.node_index is None or args.rendezvous_file is None:
        raise UserError(
            "--num-nodes needs --node-index and --rendezvous-file", code="cli-launch-node-flags-missing"
        )
    procs = procs_for_node(args.procs_per_node, args.use_all_available_devices)
    return launch_node(args.argv, args.num_nodes, args.node_index, args.rendezvous_file, procs)


def command_train_process(args: argparse.Namespace) -> int:
    from distrl.entry import dry_run, train_process
    from distrl.launch.topology import discover_topology

    cfg = _train_config(args)
    topology = discover_topology(require_launcher=args.distributed)
    if args.dry_run:
        return dry_run(cfg, topology)
    run_dir = RunDir(args.run_dir or default_run_dir(args, cfg.env.id), args.resume, args.overwrite)
    return train_process(cfg, topology, run_dir)


def command_eval(args: argparse.Namespace) -> int:
    import numpy as np
    import torch

    from distrl.algos.registry import algorithm, load
    from distrl.eval.policy import load_policy

    torch.set_num_threads(1)  # tiny networks: extra threads only add synchronisation
    loaded = load_policy(args.checkpoint, best=args.best)
    episodes = args.episodes if args.episodes is not None else loaded.cfg.eval.episodes
    if episodes < 1:
        raise UserError(f"--episodes {episodes}: must be at least 1", code="cli-count-below-one")
    seed = args.seed if args.seed is not None else loaded.cfg.eval.seed
    known = algorithm(loaded.cfg.algo.name)
    returns = load(known.evaluator)(loaded.cfg, loaded.policy, episodes, seed)
    result = {
        "return_mean": float(np.mean(returns)),
        "return_std": float(np.std(returns)),
        "episodes": episodes,
        "returns": returns,
        "env": load(known.evaluated_on)(loaded.cfg),
        "checkpoint": str(loaded.checkpoint),
        "chosen": loaded.chosen,
        "global_step": loaded.global_step,
    }
    print(json.dumps(result) if args.json else known.eval_line.format(**result))
    return 0


def add_collect_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--env", required=True, help="Gymnasium env id or module:Class (Discrete or flat Box actions)"
    )
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
    from distrl.config.sections import EnvConfig
    from distrl.data.collect import collect_dataset
    from distrl.envs import check_env

    for flag, value in (
        ("--steps", args.steps),
        ("--rows-per-file", args.rows_per_file),
        ("--num-envs", args.num_envs),
    ):
        if value < 1:
            raise UserError(f"{flag} {value}: must be at least 1", code="cli-count-below-one")
    env_cfg = EnvConfig(id=args.env, num_envs=args.num_envs)
    check_env(env_cfg)
    files = collect_dataset(env_cfg, args.policy, args.steps, args.out, args.rows_per_file, args.seed)
    print(f"distrl: wrote {args.steps} transitions of {args.env} in {files} file(s) to {args.out}")
    return 0


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    add_checkpoint_arguments(parser)
    parser.add_argument(
        "--format",
        required=True,
        metavar="FORMAT",  # checked against the checkpoint's algorithm, a plug-in's own formats too
        help="one the checkpoint's algorithm exports: torchscript or onnx (a policy of tensors), "
        "transformers (a directory with a GPT-2 model and tokenizer, for GRPO's policies), or one an "
        "algorithm of your own declares",
    )
    parser.add_argument("--out", required=True, type=Path, help="file to write")


def command_export(args: argparse.Namespace) -> int:
    from distrl.algos.registry import algorithm
    from distrl.config.run_algorithm import export
    from distrl.eval.policy import load_policy

    loaded = load_policy(args.checkpoint, best=args.best)
    formats = algorithm(loaded.cfg.algo.name).exports
    if args.format not in formats:
        raise UserError(
            f"--format {args.format}: the {loaded.algorithm} policy of {loaded.checkpoint} is written with "
            f"--format {' or '.join(formats)}",
            code="export-format-unsupported",
        )
    export(loaded.cfg, loaded.policy, loaded.observation_space, args.format, args.out, "--out")
    print(
        f"distrl: exported the {loaded.algorithm} policy of the {loaded.chosen} checkpoint "
        f"{loaded.checkpoint} to {args.out} ({args.format})"
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

    from distrl.ope.estimators import Bootstrap
    from distrl.ope.report import evaluate_checkpoint_offline, print_report, report_json

    torch.set_num_threads(1)  # tiny networks: extra threads only add synchronisation
    if args.bootstrap < 1:
        raise UserError(f"--bootstrap {args.bootstrap}: must be at least 1", code="cli-count-below-one")
    if args.max_rows is not None and args.max_rows < 1:
        raise UserError(f"--max-rows {args.max_rows}: must be at least 1", code="cli-count-below-one")
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
        "train a policy: in this process, or one rank of torchrun, srun, a file rendezvous or Ray",
        add_train_arguments,
        command_train,
        examples=(
            (
                "distrl train --config configs/cartpole_ppo.yaml",
                "train until the config's stop rule or budget",
            ),
            (
                "distrl train --env Acrobot-v1 --total-steps 200000 algo.learning_rate=1e-3",
                "no config file: defaults, flags and dotted overrides",
            ),
            (
                "python -m torch.distributed.run --nproc_per_node=2 -m distrl.train "
                "--config configs/cartpole_ppo.yaml --distributed",
                "2 ranks on this machine (Isaac Lab's --task, --num_envs, --headless also work)",
            ),
            (
                "distrl train --config configs/cartpole_ppo.yaml --launcher ray workers.env=2",
                "Ray mode: a learner and 2 env workers",
            ),
            (
                "distrl train --config configs/cartpole_ppo.yaml --resume",
                "continue from the newest checkpoint",
            ),
        ),
        takes_overrides=True,
    ),
    "config": Subcommand(
        "print a config as training would use it: every default filled in, and each rank's sizes",
        add_config_arguments,
        command_config,
        examples=(
            ("distrl config configs/cartpole_ppo.yaml", "the resolved config, sizes for one process"),
            (
                "distrl config configs/halfcheetah_ppo.yaml --ranks 8 env.num_envs=64",
                "with an override, as 8 ranks would share it out",
            ),
        ),
        takes_overrides=True,
    ),
    "eval": Subcommand(
        "evaluate a checkpoint: deterministic episodes (held-out prompts for GRPO)",
        add_eval_arguments,
        command_eval,
        examples=(
            (
                "distrl eval --checkpoint runs/cartpole_ppo",
                "the run's newest checkpoint, eval.episodes episodes",
            ),
            (
                "distrl eval --checkpoint runs/cartpole_ppo --best",
                "the checkpoint whose weights scored best at the run's own checks",
            ),
            ("distrl eval --checkpoint runs/cartpole_ppo --episodes 100 --json", "one JSON object"),
        ),
    ),
    "status": Subcommand(
        "show a Ray cluster's resources and its distrl jobs' workers: state, restarts, CPU, memory, work",
        add_status_arguments,
        command_status,
        examples=(
            ("distrl status", "the Ray cluster this machine belongs to"),
            ("distrl status --run-dir runs/cartpole_ppo", "a job that started its own local Ray"),
        ),
    ),
    "collect": Subcommand(
        "log transitions of an env to Parquet files (ReAgent's columns; discrete or continuous actions)",
        add_collect_arguments,
        command_collect,
        examples=(
            ("distrl collect --env CartPole-v1 --steps 50000 --out data/cartpole", "a random policy's data"),
            (
                "distrl collect --env CartPole-v1 --steps 50000 --out data/mixed "
                "--policy epsilon-greedy:runs/cartpole_dqn:0.3",
                "a trained policy's, with exploration",
            ),
            (
                "distrl collect --env Pendulum-v1 --steps 100000 --out data/pendulum_mixed "
                "--policy epsilon-greedy:runs/pendulum_sac:0.5",
                "continuous actions: half a SAC policy's, half random",
            ),
        ),
    ),
    "export": Subcommand(
        "write a checkpoint's deterministic policy as TorchScript, ONNX or a transformers model",
        add_export_arguments,
        command_export,
        examples=(
            ("distrl export --checkpoint runs/cartpole_ppo --format onnx --out policy.onnx", "one ONNX file"),
            (
                "distrl export --checkpoint runs/grpo_reverse --format transformers --out reverse-model",
                "a GRPO policy as a transformers GPT-2 directory",
            ),
        ),
    ),
    "plot": Subcommand(
        "draw learning curves from run dirs (seeds of one config: mean and min-max band)",
        add_plot_arguments,
        command_plot,
        examples=(
            ("distrl plot runs/seed1 runs/seed2 --out curves.png", "episode return against env steps"),
            (
                "distrl plot runs/a --metric sps --x time_s --out speed.png",
                "another metric, against seconds of training",
            ),
        ),
    ),
    "evaluate-offline": Subcommand(
        "estimate a dqn checkpoint's value from logged data (IPS, DM, DR, SDR, WDR)",
        add_evaluate_offline_arguments,
        command_evaluate_offline,
        examples=(
            (
                "distrl evaluate-offline --checkpoint runs/cartpole_offline_dqn --data data/cartpole",
                "estimates with bootstrap intervals",
            ),
        ),
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
    if args.verbose:  # for the processes it starts too
        os.environ[VERBOSE_ENV] = "1"
    # The subcommand's own arguments as given: a node launcher hands them to its processes.
    args.argv = list(sys.argv[1:] if argv is None else argv)[1:]
    try:
        return command.run(args)
    except REPORTED as exc:
        for line in str(exc).splitlines():  # several problems: a line each
            print(f"distrl: error: {line}", file=sys.stderr)
        return exit_status(exc)
    except BrokenPipeError:  # `distrl config ... | head`: the reader has what it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


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
