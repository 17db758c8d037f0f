"""Learning quality against the number of ranks: does adding ranks ever make learning worse?

Trains the shipped configs as a user would (``distrl train`` on 1 rank, torchrun on more) and
judges every run by ``distrl eval`` (10 deterministic episodes on the evaluation seeds):
  * CartPole-v1, seeds 1..10, at 1, 2 and 4 ranks: solved (eval >= 475) and env steps until the
    stop check ended the run (200k if it never did);
  * Pendulum-v1 and HalfCheetah-v5, seeds 1..3, at 1 and 2 ranks: final eval return;
  * memory: positions-only CartPole (velocities hidden), seeds 1..10, at 1 and 2 ranks, 100k env
    steps at most: solved or not, with the shipped LSTM policy (``memory``), with the same
    config without memory (``memory-mlp``: ``model.memory=none``), and with APPO collecting one
    update ahead (``memory-appo``).
``--per-rank-sizes`` adds the rule distrl had before (every rank its own copy of the config's
envs and minibatch count, so the global batch grows with the ranks) for comparison.

Learning, not speed, is measured: runs share the cores (1-rank runs two at a time, torchrun runs
alone; 4 ranks share 2 cores), and every contender gets the same config, seeds and step budget.

Writes each suite's learning curves (mean and min-max band over the seeds, one line per rank
count) to benchmarks/figures/learning_SUITE.png with distrl plot.

Usage: python benchmarks/learning_bench.py [--envs cartpole pendulum halfcheetah]
       [--per-rank-sizes] [--ranks N ...] [--seeds S ...] [--json results.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from distrl.io.plot import plot_runs

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cartpole_bench import distrl_eval, env_without_launcher  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SOLVED_RETURN = 475.0
SUITES = {
    # name: (config, seeds, rank counts)
    "cartpole": ("cartpole_ppo.yaml", list(range(1, 11)), [1, 2, 4]),
    "pendulum": ("pendulum_ppo.yaml", [1, 2, 3], [1, 2]),
    "halfcheetah": ("halfcheetah_ppo.yaml", [1, 2, 3], [1, 2]),
    "memory": ("cartpole_positions_lstm_ppo.yaml", list(range(1, 11)), [1, 2]),
    "memory-mlp": ("cartpole_positions_lstm_ppo.yaml", list(range(1, 11)), [1, 2]),
    "memory-appo": ("cartpole_positions_lstm_ppo.yaml", list(range(1, 11)), [1, 2]),
}
SUITE_OVERRIDES = {
    "memory-mlp": ["model.memory=none"],
    # The same hyperparameters, collected one update ahead of the learner by a collector process.
    "memory-appo": ["algo.name=appo", "collect.processes=1", "collect.lag=1"],
}
"""What a suite changes in its config."""
SOLVED_SUITES = ("cartpole", "memory", "memory-mlp", "memory-appo")
"""Suites judged by how many seeds solve (eval >= 475) rather than by their return."""
# distrl's rule before global sizes: each rank had the config's env count and minibatch count.
OLD_MINIBATCHES = {"cartpole": 2, "pendulum": 8, "halfcheetah": 32}


@dataclass
class Run:
    suite: str
    sizes: str
    ranks: int
    seed: int
    overrides: list[str] = field(default_factory=list)
    eval_return: float = float("nan")
    env_steps: int = 0
    wall_s: float = 0.0


class Cores:
    """Hands out the machine's cores: a run takes min(ranks, cores) of them until it ends."""

    def __init__(self, total: int) -> None:
        self.free = total
        self.total = total
        self.cond = threading.Condition()

    def take(self, n: int) -> int:
        n = min(n, self.total)
        with self.cond:
            self.cond.wait_for(lambda: self.free >= n)
            self.free -= n
        return n

    def give(self, n: int) -> None:
        with self.cond:
            self.free += n
            self.cond.notify_all()


def train_cmd(run: Run, config: Path, run_dir: Path, port: int) -> list[str]:
    args = ["--config", str(config), "--run-dir", str(run_dir), "--overwrite", "--seed", str(run.seed)]
    args += [*run.overrides, "log.tensorboard=false", "log.progress=false"]
    if run.ranks == 1:
        return [sys.executable, "-m", "distrl.train", *args]
    return [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={run.ranks}",
        "--master_addr=127.0.0.1", f"--master_port={port}", "-m", "distrl.train", *args, "--distributed",
    ]  # fmt: skip


def execute(run: Run, tmp: Path, cores: Cores, port: int) -> Run:
    config = REPO / "configs" / SUITES[run.suite][0]
    run_dir = run_dir_of(run, tmp)
    taken = cores.take(run.ranks)
    try:
        for attempt in range(2):
            start = time.perf_counter()
            done = subprocess.run(
                train_cmd(run, config, run_dir, port + attempt), check=False, capture_output=True,
                text=True, env=env_without_launcher(),
            )  # fmt: skip
            run.wall_s = time.perf_counter() - start
            if done.returncode == 0:
                break
            # Said, not hidden: the run is repeated from scratch once, and the output shows it.
            last_line = done.stderr.strip().splitlines()[-1:]
            print(f"  {run.suite} {run.sizes} ranks={run.ranks} seed={run.seed} failed (exit "
                  f"{done.returncode}): {last_line}; attempt {attempt + 1}")  # fmt: skip
        if done.returncode != 0:
            sys.exit(f"run {run} failed twice:\n{done.stderr[-3000:]}")
        run.eval_return = distrl_eval(run_dir)
    finally:
        cores.give(taken)
    last = (run_dir / "metrics.jsonl").read_text().splitlines()[-1]
    run.env_steps = json.loads(last)["global_step"]
    print(f"  {run.suite} {run.sizes} ranks={run.ranks} seed={run.seed}: eval {run.eval_return:.1f}, "
          f"{run.env_steps} env steps, {run.wall_s:.0f} s", flush=True)  # fmt: skip
    return run


def run_dir_of(run: Run, tmp: Path) -> Path:
    """Named so that ``distrl plot`` labels a group of seeds by what they share."""
    return tmp / f"{run.suite}-{run.sizes}-{run.ranks}ranks-seed{run.seed}"


def per_rank_overrides(suite: str) -> list[str]:
    config = yaml.safe_load((REPO / "configs" / SUITES[suite][0]).read_text())
    envs_per_rank = config["env"]["num_envs"]
    return [
        "env.num_envs=null", f"env.num_envs_per_rank={envs_per_rank}",
        "algo.minibatch_size=null", f"algo.num_minibatches={OLD_MINIBATCHES[suite]}",
    ]  # fmt: skip


def plan(
    suites: list[str], per_rank_sizes: bool, ranks: list[int] | None, seeds: list[int] | None
) -> list[Run]:
    """Every (suite, seed, rank count) run; ``ranks`` and ``seeds`` replace the suites' own."""
    runs = []
    for suite in suites:
        _, suite_seeds, suite_ranks = SUITES[suite]
        for seed in seeds or suite_seeds:
            for rank_count in ranks or suite_ranks:
                runs.append(Run(suite, "global (shipped)", rank_count, seed, SUITE_OVERRIDES.get(suite, [])))
                if per_rank_sizes and rank_count > 1:
                    old_rule = per_rank_overrides(suite)
                    runs.append(Run(suite, "per rank (old rule)", rank_count, seed, old_rule))
    # Longest first, so the pool does not end on one long run while a core idles.
    return sorted(runs, key=lambda r: ({"halfcheetah": 0, "pendulum": 1}.get(r.suite, 2), -r.ranks))


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cartpole_table(runs: list[Run]) -> None:
    print("\n| ranks | sizes | solved (eval >= 475) | env steps to stop, median [min-max] | eval per seed |")
    print("| --- | --- | --- | --- | --- |")
    for (sizes, ranks), group in grouped(runs).items():
        solved = sum(r.eval_return >= SOLVED_RETURN for r in group)
        steps = [r.env_steps for r in group]
        returns = " / ".join(f"{r.eval_return:.0f}" for r in group)
        print(f"| {ranks} | {sizes} | **{solved}/{len(group)}** | {statistics.median(steps):,.0f} "
              f"[{min(steps):,}-{max(steps):,}] | {returns} |")  # fmt: skip


def return_table(runs: list[Run]) -> None:
    print("\n| ranks | sizes | eval return per seed | mean +- std over seeds | wall s (shared cores) |")
    print("| --- | --- | --- | --- | --- |")
    for (sizes, ranks), group in grouped(runs).items():
        returns = [r.eval_return for r in group]
        per_seed = " / ".join(f"{x:.0f}" for x in returns)
        spread = statistics.stdev(returns) if len(returns) > 1 else 0.0
        walls = " / ".join(f"{r.wall_s:.0f}" for r in group)
        mean = statistics.mean(returns)
        print(f"| {ranks} | {sizes} | {per_seed} | {mean:.0f} +- {spread:.0f} | {walls} |")


def grouped(runs: list[Run]) -> dict[tuple[str, int], list[Run]]:
    groups: dict[tuple[str, int], list[Run]] = {}
    for run in sorted(runs, key=lambda r: (r.sizes, r.ranks, r.seed)):
        groups.setdefault((run.sizes, run.ranks), []).append(run)
    return groups


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", choices=list(SUITES), default=list(SUITES))
    parser.add_argument("--per-rank-sizes", action="store_true", help="also run the old per-rank rule")
    parser.add_argument("--ranks", type=int, nargs="+", help="these rank counts instead of the suite's")
    parser.add_argument("--seeds", type=int, nargs="+", help="these seeds instead of the suite's")
    parser.add_argument("--json", type=Path, help="write every run's result here")
    parser.add_argument(
        "--figures", type=Path, default=REPO / "benchmarks" / "figures",
        help="learning curves per suite (distrl plot: mean and min-max band over the seeds) go here",
    )  # fmt: skip
    args = parser.parse_args()
    cores = Cores(os.cpu_count() or 1)
    print(f"machine: {cores.total} cores, python {sys.version.split()[0]}")
    runs = plan(args.envs, args.per_rank_sizes, args.ranks, args.seeds)
    with tempfile.TemporaryDirectory() as tmp_name, ThreadPoolExecutor(cores.total) as pool:
        done = list(pool.map(lambda r: execute(r, Path(tmp_name), cores, free_port()), runs))
        for suite in args.envs:
            suite_dirs = [run_dir_of(r, Path(tmp_name)) for r in done if r.suite == suite]
            figure = args.figures / f"learning_{suite}.png"
            plot_runs(suite_dirs, "episode_return_mean", "global_step", figure)
            print(f"learning curves: {figure.relative_to(REPO) if figure.is_relative_to(REPO) else figure}")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in done], indent=1))
    for suite in args.envs:
        config = SUITES[suite][0]
        print(f"\n## {suite} — configs/{config}")
        suite_runs = [r for r in done if r.suite == suite]
        (cartpole_table if suite in SOLVED_SUITES else return_table)(suite_runs)


if __name__ == "__main__":
    main()
