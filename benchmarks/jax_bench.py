"""Torch learner vs JAX learner vs the compiled gymnax path, side by side in one run.

Every contender trains the shipped ``configs/cartpole_ppo.yaml`` (same hyperparameters, same
stop rule: a deterministic evaluation of >= 475, confirmed on 20 more episodes), on 1 and 2
processes (torchrun for torch, ``python -m distrl.launch.jax`` for JAX), seeds interleaved:

- time to solve: the whole process's wall time (start-up and JAX compilation included) and the
  loop's own ``time_s``, median over seeds;
- whole-loop env steps/s: a fixed budget with no stop rule, at the shipped 32 envs and at 1024.

    python benchmarks/jax_bench.py [--seeds 3] [--out BENCHMARKS_jax.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from cartpole_bench import CommandFailed, distrl_cmd, metrics_rows, run_timed

CONTENDERS = {
    "torch learner, Gymnasium envs": [],
    "JAX learner, Gymnasium envs": ["ml_framework=jax"],
    "JAX compiled, gymnax envs": ["ml_framework=jax", "env.backend=gymnax"],
}
SOLVE = ["train.stop_return=475", "train.total_steps=300000"]
THROUGHPUT_STEPS = {32: 40_000, 1024: 200_000}


def command(ranks: int, run_dir: Path, overrides: list[str]) -> list[str]:
    """torchrun for torch (``distrl_cmd``); distrl's JAX launcher for JAX on 2 processes."""
    args = [*overrides, "log.progress=false"]
    if ranks == 1 or "ml_framework=jax" not in overrides:
        return distrl_cmd(ranks, run_dir, *args)
    single = distrl_cmd(1, run_dir, *args)
    return [
        sys.executable, "-m", "distrl.launch.jax", f"--nproc_per_node={ranks}",
        "--coordinator_address=127.0.0.1:29651", *single[1:], "--distributed",
    ]  # fmt: skip


def solve(ranks: int, overrides: list[str], seed: int, root: Path) -> tuple[float, float, int]:
    """(process wall seconds, loop seconds, env steps) to the stop rule."""
    run_dir = root / "solve"
    wall, _ = run_timed(command(ranks, run_dir, [*overrides, *SOLVE, f"train.seed={seed}"]))
    last = metrics_rows(run_dir)[-1]
    if last.get("stop_check_return", 0) < 475:
        raise CommandFailed(f"{overrides} seed {seed} on {ranks} did not solve within the budget")
    return wall, last["time_s"], last["global_step"]


def throughput(ranks: int, overrides: list[str], envs: int, root: Path) -> float:
    run_dir = root / "sps"
    steps = THROUGHPUT_STEPS[envs]
    budget = [f"env.num_envs={envs}", f"train.total_steps={steps}", "train.stop_return=null"]
    run_timed(command(ranks, run_dir, [*overrides, *budget, "checkpoint.interval_steps=10000000"]))
    return metrics_rows(run_dir)[-1]["sps"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown tables here")
    args = parser.parse_args()
    solves: dict[tuple[str, int], list[tuple[float, float, int]]] = {}
    rates: dict[tuple[str, int, int], float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for seed in range(1, args.seeds + 1):  # interleaved: each seed runs every contender
            for ranks in (1, 2):
                for name, overrides in CONTENDERS.items():
                    solves.setdefault((name, ranks), []).append(solve(ranks, overrides, seed, root))
                    print(name, ranks, seed, solves[name, ranks][-1], flush=True)
        for envs in THROUGHPUT_STEPS:
            for ranks in (1, 2):
                for name, overrides in CONTENDERS.items():
                    rates[name, ranks, envs] = throughput(ranks, overrides, envs, root)
                    print(name, ranks, envs, rates[name, ranks, envs], flush=True)
    lines = [
        f"Time to solve (median of {args.seeds} seeds; shipped config, stop at an evaluation >= 475)",
        "",
        "| contender | processes | process wall s | loop s | env steps |",
        "| --- | --- | --- | --- | --- |",
    ]
    for (name, ranks), runs in solves.items():
        wall, loop, steps = (statistics.median(x) for x in zip(*runs, strict=True))
        lines.append(f"| {name} | {ranks} | {wall:.1f} | {loop:.1f} | {steps:,.0f} |")
    lines += ["", "Whole-loop env steps/s (fixed budget, no stop rule)", ""]
    lines += ["| contender | processes | envs | env steps/s | vs torch |", "| --- | --- | --- | --- | --- |"]
    for (name, ranks, envs), sps in rates.items():
        ratio = sps / rates["torch learner, Gymnasium envs", ranks, envs]
        lines.append(f"| {name} | {ranks} | {envs} | {sps:,.0f} | {ratio:.2f}x |")
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
