"""Offline DQN over seeds: the shipped ``configs/cartpole_offline_dqn.yaml`` against d3rlpy's DQN
and DiscreteCQL on the same logged CartPole-v1 data.

The data: ``distrl collect`` of ``--rows`` transitions by a uniformly random policy (the config's
setting, ReAgent's). Every contender trains on it with the config's hyperparameters (d3rlpy's
DoubleDQN and DiscreteCQL, in its own venv, with alpha ``--cql-alpha``), one torch thread a
process, under distrl's stop rule: every ``train.stop_check_every`` iterations (d3rlpy: the same
gradient steps) a greedy evaluation of ``eval.episodes`` episodes on fixed seeds, stopping once
its mean reaches ``train.stop_return``, else at the config's budget; distrl's confirmation
episodes are off, as d3rlpy has none. Then each is evaluated greedily on ``eval.seed``'s episodes
(``distrl eval``; d3rlpy on the same seeds). distrl runs on ``--ranks`` (torchrun), each rank
streaming its half of the files; distrl variants add ``--set`` overrides (``algo.cql_alpha=1``).

Usage: python benchmarks/offline_dqn_seeds_bench.py [--seeds 1 ... 10] [--d3rlpy-seeds 1 2 3]
    [--d3rlpy-algos dqn cql] [--ranks 2] [--variant NAME KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from cartpole_bench import distrl_eval, env_without_launcher, metrics_rows, run_timed
from offline_bench import D3RLPY_SCRIPT, d3rlpy_hyperparameters, ensure_d3rlpy, launcher

from distrl.config.run import load_config
from distrl.runners.loop import STOP_CHECK_SEED_OFFSET

HERE = Path(__file__).resolve().parent
CONFIG = HERE.parent / "configs" / "cartpole_offline_dqn.yaml"


def collect(data: Path, rows: int) -> None:
    if not data.exists():
        run_timed([sys.executable, "-m", "distrl", "collect", "--env", "CartPole-v1", "--steps", str(rows),
                   "--rows-per-file", str(rows // 4), "--out", str(data)])  # fmt: skip


def distrl_run(data: Path, run_dir: Path, seed: int, ranks: int, overrides: list[str]) -> dict:
    command = [*launcher(sys.executable, ranks), "-m", "distrl.train", "--config", str(CONFIG),
               "--data", str(data), "--run-dir", str(run_dir), "--overwrite", "--seed", str(seed),
               "train.stop_confirm_episodes=0", "log.tensorboard=false", "log.progress=false",
               *overrides, *["--distributed"] * (ranks > 1)]  # fmt: skip
    wall_s, _ = run_timed(command)
    batch = load_config(CONFIG).algo.batch_size
    steps = metrics_rows(run_dir)[-1]["global_step"] // batch
    return {"eval_return": distrl_eval(run_dir), "gradient_steps": steps, "wall_s": wall_s}


def d3rlpy_run(python: Path, algo: str, data: Path, out: Path, seed: int, cql_alpha: float) -> dict:
    cfg = load_config(CONFIG)
    hyper = {**d3rlpy_hyperparameters(cfg), "seed": seed, "cql_alpha": cql_alpha}
    budget = cfg.train.total_steps // cfg.algo.batch_size
    command = [
        str(python), str(D3RLPY_SCRIPT), "--data", str(data), "--out", str(out), "--steps", str(budget),
        "--warmup-steps", "100", "--hyper", json.dumps(hyper), "--algo", algo, "--env", cfg.env.id,
        "--eval-episodes", str(cfg.eval.episodes), "--eval-seed", str(cfg.eval.seed),
        "--stop-return", str(cfg.train.stop_return),
        "--check-every", str(cfg.train.stop_check_every * cfg.algo.gradient_steps),
        "--check-seed", str(cfg.eval.seed + STOP_CHECK_SEED_OFFSET),
    ]  # fmt: skip
    subprocess.run(command, check=True, env=env_without_launcher())
    return json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=list(range(1, 11)))
    parser.add_argument("--d3rlpy-seeds", nargs="*", type=int, default=[1, 2, 3])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--cql-alpha", type=float, default=1.0, help="d3rlpy DiscreteCQL's alpha")
    parser.add_argument("--d3rlpy-algos", nargs="+", choices=["dqn", "cql"], default=["dqn", "cql"],
                        help="d3rlpy's DoubleDQN, DiscreteCQL or both")  # fmt: skip
    parser.add_argument("--variant", nargs="+", action="append", default=[], metavar=("NAME", "KEY=VALUE"),
                        help="also run distrl with these overrides")  # fmt: skip
    parser.add_argument("--data-dir", type=Path, default=None)
    args = parser.parse_args()
    d3rlpy = ensure_d3rlpy(HERE / ".d3rlpy-venv") if args.d3rlpy_seeds else None
    contenders = {"distrl, shipped config": [], **{name: overrides for name, *overrides in args.variant}}
    results: dict[str, list[dict]] = {name: [] for name in contenders}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        data = (args.data_dir or tmp) / "cartpole-random"
        collect(data, args.rows)
        for seed in sorted(set(args.seeds) | set(args.d3rlpy_seeds)):  # interleaved: the machine is noisy
            if seed in args.seeds:
                for name, overrides in contenders.items():
                    results[name].append(distrl_run(data, tmp / "distrl", seed, args.ranks, overrides))
            if d3rlpy is not None and seed in args.d3rlpy_seeds:
                names = {"dqn": "d3rlpy DoubleDQN", "cql": f"d3rlpy DiscreteCQL (alpha {args.cql_alpha:g})"}
                for algo in args.d3rlpy_algos:
                    name = names[algo]
                    out = tmp / f"d3rlpy-{algo}-{seed}.json"
                    results.setdefault(name, []).append(
                        d3rlpy_run(d3rlpy, algo, data, out, seed, args.cql_alpha)
                    )
            print(f"seed {seed}: " + json.dumps({k: v[-1] for k, v in results.items() if v}), flush=True)
    cfg = load_config(CONFIG)
    print(f"\n## Offline DQN on {args.rows:,} random-policy CartPole-v1 transitions: stop at "
          f"{cfg.train.stop_return:g}, budget {cfg.train.total_steps // cfg.algo.batch_size:,} gradient "
          f"steps of {cfg.algo.batch_size}; distrl on {args.ranks} ranks\n")  # fmt: skip
    budget = cfg.train.total_steps // cfg.algo.batch_size
    print("| contender | eval return per seed | mean | min | stopped by the rule | seeds at 475+ "
          "| gradient steps, median |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, runs in results.items():
        returns = [r["eval_return"] for r in runs]
        per_seed = " / ".join(f"{value:.0f}" for value in returns)
        solved = sum(value >= 475 for value in returns)
        # A run the rule stopped ended an iteration or more short of the budget.
        stopped = sum(r["gradient_steps"] <= budget - cfg.algo.gradient_steps for r in runs)
        steps = statistics.median(r["gradient_steps"] for r in runs)
        print(f"| {name} | {per_seed} | {statistics.mean(returns):.1f} | {min(returns):.0f} | "
              f"{stopped}/{len(runs)} | {solved}/{len(returns)} | {steps:,.0f} |")  # fmt: skip


if __name__ == "__main__":
    main()
