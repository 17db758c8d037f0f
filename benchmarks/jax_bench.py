"""Torch learner vs JAX learner vs the compiled gymnax path, side by side in one run.

Every contender trains the shipped ``configs/cartpole_ppo.yaml`` (same hyperparameters, same
stop rule: a deterministic evaluation of >= 475, confirmed on 20 more episodes), on 1 and 2
processes (torchrun for torch, ``python -m distrl.launch.jax`` for JAX), seeds interleaved:

- time to solve: the whole process's wall time (start-up and JAX compilation included) and the
  loop's own ``time_s``, median over seeds;
- whole-loop env steps/s: a fixed budget with no stop rule, with the shipped config (32 envs in
  all) and with ``configs/cartpole_ppo_4096.yaml`` (4096 envs per process, Isaac Lab's PPO
  settings; the torch learner also with its torch-tensor envs there), over the whole run and
  after the first update (JAX compiles during it).

    python benchmarks/jax_bench.py [--seeds 3] [--out BENCHMARKS_jax.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from cartpole_bench import REPO, CommandFailed, distrl_cmd, metrics_rows, run_timed

CONTENDERS = {
    "torch learner, Gymnasium envs": [],
    "JAX learner, Gymnasium envs": ["ml_framework=jax"],
    "JAX compiled, gymnax envs": ["ml_framework=jax", "env.backend=gymnax"],
}
SOLVE = ["train.stop_return=475", "train.total_steps=300000"]
SHIPPED = REPO / "configs" / "cartpole_ppo.yaml"
LARGE = REPO / "configs" / "cartpole_ppo_4096.yaml"
# (config, its label, contenders, env steps per process): budgets of a few seconds' work each.
THROUGHPUT = [
    (SHIPPED, "shipped, 32 envs in all", CONTENDERS, 40_000),
    (
        LARGE,
        "4096 envs per process",
        {**CONTENDERS, "torch learner, torch envs": ["env.backend=torch"]},
        1_966_080,
    ),
]


THROUGHPUT_TITLE = (
    "Whole-loop env steps/s (fixed budget, no stop rule; ratios of the rate after the first update "
    "to the torch learner with Gymnasium envs, on the same config and processes and as shipped)"
)
THROUGHPUT_COLUMNS = [
    "config", "contender", "processes", "env steps/s", "after 1st update", "vs torch", "vs torch as shipped"
]  # fmt: skip


def _row(cells: list) -> str:
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


def command(ranks: int, run_dir: Path, overrides: list[str], config: Path = SHIPPED) -> list[str]:
    """torchrun for torch (``distrl_cmd``); distrl's JAX launcher for JAX on 2 processes."""
    args = [*overrides, "log.progress=false"]
    if ranks == 1 or "ml_framework=jax" not in overrides:
        return distrl_cmd(ranks, run_dir, *args, config=config)
    single = distrl_cmd(1, run_dir, *args, config=config)
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


def throughput(ranks: int, overrides: list[str], config: Path, steps: int, root: Path) -> tuple[float, float]:
    """Env steps/s over the whole loop and after its first update."""
    run_dir = root / "sps"
    budget = [f"train.total_steps={steps * ranks}", "train.stop_return=null"]
    run_timed(command(ranks, run_dir, [*overrides, *budget, "checkpoint.interval_steps=100000000"], config))
    first, last = metrics_rows(run_dir)[0], metrics_rows(run_dir)[-1]
    steady = (last["global_step"] - first["global_step"]) / (last["time_s"] - first["time_s"])
    return last["sps"], steady


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="also write the markdown tables here")
    args = parser.parse_args()
    solves: dict[tuple[str, int], list[tuple[float, float, int]]] = {}
    rates: dict[tuple[str, str, int], tuple[float, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for seed in range(1, args.seeds + 1):  # interleaved: each seed runs every contender
            for ranks in (1, 2):
                for name, overrides in CONTENDERS.items():
                    solves.setdefault((name, ranks), []).append(solve(ranks, overrides, seed, root))
                    print(name, ranks, seed, solves[name, ranks][-1], flush=True)
        for config, label, contenders, steps in THROUGHPUT:
            for ranks in (1, 2):
                for name, overrides in contenders.items():
                    rates[label, name, ranks] = throughput(ranks, overrides, config, steps, root)
                    print(label, name, ranks, rates[label, name, ranks], flush=True)
    lines = [
        f"Time to solve (median of {args.seeds} seeds; shipped config, stop at an evaluation >= 475)",
        "",
        "| contender | processes | process wall s | loop s | env steps |",
        "| --- | --- | --- | --- | --- |",
    ]
    for (name, ranks), runs in solves.items():
        wall, loop, steps = (statistics.median(x) for x in zip(*runs, strict=True))
        lines.append(f"| {name} | {ranks} | {wall:.1f} | {loop:.1f} | {steps:,.0f} |")
    lines += ["", THROUGHPUT_TITLE, "", _row(THROUGHPUT_COLUMNS), _row(["---"] * len(THROUGHPUT_COLUMNS))]
    for (label, name, ranks), (sps, steady) in rates.items():
        same = rates[label, "torch learner, Gymnasium envs", ranks][1]
        shipped = rates[THROUGHPUT[0][1], "torch learner, Gymnasium envs", ranks][1]
        cells = [
            label,
            name,
            ranks,
            f"{sps:,.0f}",
            f"{steady:,.0f}",
            f"{steady / same:.2f}x",
            f"{steady / shipped:.2f}x",
        ]
        lines.append(_row(cells))
    text = "\n".join(lines)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
