"""Collecting while learning (``collect.processes``, ``collect.lag``) against a rank that collects,
then learns: training env steps per second on a fixed budget, and the mean sample age.

Contenders, on PPO's and APPO's CartPole configs (the same sizes) and the same budget:
  * ppo: one process stepping its own envs (collect, then learn);
  * ppo, 1 process, lag 0: the envs stepped in a collector process, in turns (the same training);
  * ppo, 1 process, lag 1: the process collects the next segment while the learner updates;
  * appo, 1 process, lag 1: the same with APPO's V-trace correction;
  * ppo, 2 ranks: torchrun's two ranks, each with half the envs (the machine's data-parallel way
    to use its second core).
Each contender runs ``--repeats`` times, interleaved; medians reported. Speed is the training
loop's own (the final line's seconds, start-up excluded). ``--solve`` also trains ppo and
appo (lag 1) on ``--seeds`` to the configs' stop return and reports env steps and seconds.

``--root CHECKOUT`` also runs every contender from another checkout's code (a ``git worktree`` of
an older commit), interleaved with this one's, and reports this tree's speed over that one's.

Usage: python benchmarks/collector_processes_bench.py [--steps 65536] [--repeats 3 (0: none)] [--solve]
       [--root CHECKOUT]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
from pathlib import Path

from cartpole_bench import distrl_cmd, metrics_rows, run_timed

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "cartpole_ppo.yaml"
APPO = REPO / "configs" / "cartpole_appo.yaml"
CONTENDERS = {
    "ppo": (1, CONFIG, []),
    "ppo, 1 process, lag 0": (1, CONFIG, ["collect.processes=1"]),
    "ppo, 1 process, lag 1": (1, CONFIG, ["collect.processes=1", "collect.lag=1"]),
    "appo, 1 process, lag 1": (1, APPO, []),
    "ppo, 2 ranks": (2, CONFIG, []),
}
"""Name: (ranks, config, overrides). APPO's config is PPO's with ``algo.name: appo`` (its lambda
V-trace's, 1) and one collector process one update ahead."""
FINAL_LINE = re.compile(r"trained (\d+) env steps on \d+ rank\(s\) in ([\d.]+)s")


def train(
    run_dir: Path, ranks: int, overrides: list[str], config: Path, src: Path | None = None
) -> tuple[int, float, list[dict]]:
    """(env steps, the loop's seconds, metrics rows) of one run (of the code in ``src``, if given)."""
    command = distrl_cmd(ranks, run_dir, "log.progress=false", *overrides, config=config)
    _, output = run_timed(command, src=src)
    found = FINAL_LINE.search(output)
    if found is None:
        sys.exit(f"no final line in the output of {run_dir}:\n{output[-2000:]}")
    return int(found[1]), float(found[2]), metrics_rows(run_dir)


def mean_age(rows: list[dict]) -> float:
    return statistics.mean(row.get("sample_age", 0.0) for row in rows)


def print_speeds(
    speeds: dict[str, list[float]], ages: dict[str, float], base_name: str, heading: str
) -> None:
    """A table of each contender's median env steps/s, as a multiple of ``base_name``'s, and its
    mean sample age, under ``heading``."""
    base = statistics.median(speeds[base_name])
    print(f"\n## {heading}\n")
    print(f"| contender | env steps/s | vs {base_name} | mean sample age |")
    print("| --- | --- | --- | --- |")
    for name, values in speeds.items():
        median = statistics.median(values)
        print(f"| {name} | {median:,.0f} | {median / base:.2f}x | {ages[name]:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=65_536)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--solve", action="store_true")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--root", type=Path, help="also run every contender from this checkout's code")
    args = parser.parse_args()
    budget = [f"train.total_steps={args.steps}", "train.stop_return=null"]
    sources = {"": None, **({" (root)": args.root / "src"} if args.root else {})}
    speeds: dict[str, list[float]] = {name + tag: [] for name in CONTENDERS for tag in sources}
    ages: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for name, (ranks, config, overrides) in CONTENDERS.items():
                for tag, src in sources.items():
                    run_dir = Path(tmp) / f"{repeat}"
                    steps, seconds, rows = train(run_dir, ranks, [*budget, *overrides], config, src)
                    speeds[name + tag].append(steps / seconds)
                    ages[name + tag] = mean_age(rows)
                    print(f"{name}{tag}: {steps / seconds:,.0f} env steps/s", flush=True)
        if args.repeats:
            heading = (
                f"Collecting while learning, CartPole-v1, {args.steps:,} env steps, medians of "
                f"{args.repeats} interleaved runs"
            )
            print_speeds(speeds, ages, "ppo", heading)
            if args.root:
                print(f"\n## This tree over {args.root}'s code, the same runs\n")
                print("| contender | this tree / root |\n| --- | --- |")
                for name in CONTENDERS:
                    ratio = statistics.median(speeds[name]) / statistics.median(speeds[name + " (root)"])
                    print(f"| {name} | {ratio:.2f}x |")
        if args.solve:
            print("\n| contender | seed | env steps to the stop return | loop seconds |")
            print("| --- | --- | --- | --- |")
            for seed in args.seeds:
                for name in ("ppo", "appo, 1 process, lag 1"):
                    ranks, config, overrides = CONTENDERS[name]
                    steps, seconds, _ = train(
                        Path(tmp) / "solve", ranks, [f"--seed={seed}", *overrides], config
                    )
                    print(f"| {name} | {seed} | {steps:,} | {seconds:.1f} |", flush=True)


if __name__ == "__main__":
    main()
