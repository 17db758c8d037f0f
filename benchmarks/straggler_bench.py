"""DD-PPO straggler preemption: 2 ranks on CartPole-v1 with rank 1's env steps made 3x slower.

Runs, side by side: 2 ranks with no slow rank (reference); rank 1 slowed, no preemption;
rank 1 slowed, ``train.straggler_threshold=0.5`` (with 2 ranks: rank 1 stops collecting once
rank 0 is done, after at least a quarter of its rollout); rank 1 slowed, APPO with each rank's
envs stepped by a collector process one update ahead (``collect.processes=1 collect.lag=1``; 4
busy processes on the machine's cores). Rank 1 is slowed by busy-waiting in
every env step for twice what a whole env step costs on average in the reference run (policy
forward and buffer writes included), so its collection takes ~3x as long, as on a slower machine.
Prints the median iteration time, env steps per second and the share of the full rollout the
ranks collected.

Usage: python benchmarks/straggler_bench.py [--rollout-steps 128] [--steps 150000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cartpole_bench import PER_RANK_ENVS, WEAK_SCALING, distrl_cmd, timed  # noqa: E402


class SlowCartPole(gym.Wrapper):
    """CartPole-v1 whose steps cost ``extra_s`` more on global rank ``slow_rank`` only."""

    def __init__(self, extra_s: float = 0.0, slow_rank: int = 1) -> None:
        super().__init__(gym.make("CartPole-v1"))
        self.extra_s = extra_s if os.environ.get("RANK") == str(slow_rank) else 0.0

    def step(self, action):
        deadline = time.perf_counter() + self.extra_s
        while time.perf_counter() < deadline:  # busy: a slower CPU, not an idle one
            pass
        return self.env.step(action)


def iteration_stats(run_dir: Path) -> dict[str, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steady = rows[len(rows) // 5 :]
    times = [b["time_s"] - a["time_s"] for a, b in zip(steady, steady[1:], strict=False)]
    return {
        "iteration_ms": 1e3 * statistics.median(times),
        "sps": rows[-1]["sps"],
        "rollout_fraction": statistics.mean(r["rollout_fraction"] for r in steady),
        "collect_share": statistics.mean(r["collect_share"] for r in steady),
    }


APPO = ["algo.name=appo", "collect.processes=1", "collect.lag=1"]


def run(tmp: Path, name: str, steps: int, rollout_steps: int, *overrides: str) -> dict[str, float]:
    run_dir = tmp / name
    args = [
        "--total-steps", str(steps), "--env", "straggler_bench:SlowCartPole",
        "train.stop_return=null", "train.device=cpu", f"algo.rollout_steps={rollout_steps}", *WEAK_SCALING,
        *overrides,
    ]  # fmt: skip
    timed(distrl_cmd(2, run_dir, *args))
    return iteration_stats(run_dir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollout-steps", type=int, default=128)
    parser.add_argument("--steps", type=int, default=150_000, help="env steps per run, all ranks")
    parser.add_argument("--threshold", type=float, default=0.5)
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, python {sys.version.split()[0]}")
    # The ranks import SlowCartPole from this folder.
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        reference = run(tmp, "reference", args.steps, args.rollout_steps)
        # Average cost of one env step inside collection.
        collect_s = reference["collect_share"] * reference["iteration_ms"] / 1e3
        per_env_step = collect_s / (args.rollout_steps * PER_RANK_ENVS)
        slow = [f"env.kwargs.extra_s={2 * per_env_step:.7f}"]
        results = {
            "no slow rank": reference,
            "rank 1 slowed 3x, no preemption": run(tmp, "slow", args.steps, args.rollout_steps, *slow),
            f"rank 1 slowed 3x, straggler_threshold={args.threshold}": run(
                tmp,
                "preempt",
                args.steps,
                args.rollout_steps,
                *slow,
                f"train.straggler_threshold={args.threshold}",
            ),
            # Each rank's envs stepped by a collector process one update ahead: the slow rank's
            # collection overlaps its update instead of adding to it.
            "rank 1 slowed 3x, APPO, 1 collector process per rank, collect.lag=1": run(
                tmp, "appo", args.steps, args.rollout_steps, *slow, *APPO
            ),
        }
    print(
        f"\n2 ranks, algo.rollout_steps={args.rollout_steps}, {PER_RANK_ENVS} envs per rank; "
        f"rank 1 busy-waits {2e6 * per_env_step:.1f} us per env step"
    )
    print("| setting | median iteration ms | env steps/s | rollout collected (share of full) |")
    print("| --- | --- | --- | --- |")
    for name, row in results.items():
        share = 100 * row["rollout_fraction"]
        print(f"| {name} | {row['iteration_ms']:.1f} | {row['sps']:.0f} | {share:.0f}% |")


if __name__ == "__main__":
    main()
