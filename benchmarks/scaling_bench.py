"""Throughput of DD-PPO on CartPole-v1 against the number of ranks, on a machine with many cores.

For each rank count N (default 1 2 4 8 16; only counts that fit the machine's cores are run),
trains N torchrun ranks on the CPU for a fixed budget of env steps per rank with the shipped
CartPole config (32 envs on every rank) and no early stop, then N independent 1-rank trainings
side by side (what the machine gives N processes at all: shared caches, memory bandwidth, SMT
siblings and clock limits included). Prints env steps/s of the whole loop, the speed-up over 1
rank, the N-process ceiling, the share of that ceiling DD-PPO reaches, and the gradient
all-reduce share of iteration time.

Usage: python benchmarks/scaling_bench.py [--ranks 1 2 4 8 16] [--rollout-steps 16 128]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cartpole_bench import (  # noqa: E402
    THROUGHPUT_STEPS,
    WEAK_SCALING,
    distrl_cmd,
    independent_sps,
    run_metrics,
    timed,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--rollout-steps", type=int, nargs="+", default=[16, 128])
    parser.add_argument("--steps-per-rank", type=int, default=THROUGHPUT_STEPS)
    args = parser.parse_args()
    cores = os.cpu_count() or 1
    ranks = [n for n in args.ranks if n <= cores]
    print(f"machine: {cores} cores, python {sys.version.split()[0]}; rank counts {ranks}")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for rollout_steps in args.rollout_steps:
            print(f"\n## algo.rollout_steps={rollout_steps}, {args.steps_per_rank} env steps per rank")
            print("| ranks | DD-PPO env steps/s | speed-up | N independent processes | "
                  "DD-PPO / ceiling | all-reduce share |")  # fmt: skip
            print("| --- | --- | --- | --- | --- | --- |")
            overrides = ["train.stop_return=null", "train.device=cpu", f"algo.rollout_steps={rollout_steps}"]
            overrides += WEAK_SCALING
            single = None
            for n in ranks:
                run_dir = tmp / f"r{n}-{rollout_steps}"
                timed(distrl_cmd(n, run_dir, "--total-steps", str(n * args.steps_per_rank), *overrides))
                row = run_metrics(run_dir)
                single = single or row["sps"]
                ceiling = independent_sps(tmp, n, ["--total-steps", str(args.steps_per_rank), *overrides])
                print(
                    f"| {n} | {row['sps']:.0f} | {row['sps'] / single:.2f}x | {ceiling:.0f} "
                    f"({ceiling / single:.2f}x) | {100 * row['sps'] / ceiling:.0f}% "
                    f"| {100 * row['grad_sync_share']:.1f}% |",
                    flush=True,
                )


if __name__ == "__main__":
    main()
