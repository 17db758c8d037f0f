"""GRPO on every shipped small task over seeds, with the shipped settings and with remedies for
the collapse (issue 57): which settings reach the stop rule on every task and seed.

Each run trains ``configs/grpo_<task>.yaml`` as shipped (since issue 57 they carry the entropy
floor, ``no_floor`` the configs as they were before) plus one variant's overrides: one process
with one thread, two runs at a time, or ``--ranks`` under torchrun, one run at a time. Reported
per run: whether the stop check passed (held-out exact match >= ``train.stop_return``,
confirmed), the best and last held-out exact match of the stop checks, completions until the run
ended, and the training policy's entropy, share of all-equal groups and unfinished share over the
last 20 updates; per variant and task, runs passed over seeds.

Usage: python benchmarks/grpo_tasks_bench.py [--tasks reverse sort count increment max]
       [--seeds 0 1 2] [--variants shipped dynamic ...] [--ranks 2] [--json out.json]
       [--variant NAME=KEY=VALUE,KEY=VALUE ...]   (a variant of one's own)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cartpole_bench import metrics_rows, run_timed  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TASKS = ("reverse", "sort", "count", "increment", "max")
VARIANTS: dict[str, list[str]] = {
    "shipped": [],
    "no_floor": ["algo.entropy_target=null"],
    "dynamic": ["algo.dynamic_sampling=true"],
    "floor": ["algo.entropy_target=0.3"],
    "lr_3e-4": ["algo.learning_rate=3e-4"],
    "budget2x": ["train.total_steps=327680"],
}
"""Overrides of each variant, after the task's config. No clipping variant: with one epoch of one
minibatch (these configs) the ratio is exactly 1 and the clip never acts."""


@dataclass
class Result:
    variant: str
    task: str
    seed: int
    passed: bool
    best: float
    last: float
    completions: int
    train_s: float
    entropy: float
    zero_advantage_groups: float
    unfinished_fraction: float


def tail_mean(rows: list[dict], key: str, last: int = 20) -> float:
    values = [row[key] for row in rows if key in row][-last:]
    return statistics.fmean(values) if values else float("nan")


def run(variant: str, overrides: list[str], task: str, seed: int, root: Path, ranks: int) -> Result:
    run_dir = root / f"{variant}-{task}-{seed}"
    launch = ["-m", "distrl.train"]
    if ranks > 1:  # the global batch shared out over torchrun's ranks
        launch = ["-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={ranks}",
                  "--master_addr=127.0.0.1", "--master_port=29537", *launch, "--distributed"]  # fmt: skip
    cmd = [sys.executable, *launch, "--config", str(REPO / "configs" / f"grpo_{task}.yaml"),
           "--run-dir", str(run_dir), "--overwrite", "--seed", str(seed),
           "log.progress=false", "log.tensorboard=false", *overrides]  # fmt: skip
    _, stdout = run_timed(cmd, REPO)  # one thread per process
    rows = metrics_rows(run_dir)
    checks = [row["stop_check_return"] for row in rows if "stop_check_return" in row]
    return Result(
        variant, task, seed,
        passed="stopped: the evaluation check passed" in stdout,
        best=max(checks, default=float("nan")),
        last=checks[-1] if checks else float("nan"),
        completions=rows[-1]["global_step"],
        train_s=rows[-1]["time_s"],
        entropy=tail_mean(rows, "entropy"),
        zero_advantage_groups=tail_mean(rows, "zero_advantage_groups"),
        unfinished_fraction=tail_mean(rows, "unfinished_fraction"),
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=TASKS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--variants", nargs="+", default=["shipped"])
    parser.add_argument("--variant", nargs="+", default=[], metavar="NAME=KEY=VALUE,...")
    parser.add_argument(
        "--ranks", type=int, default=1, help="ranks per run (torchrun); runs of 2 go one at a time"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    variants = {name: VARIANTS[name] for name in args.variants if name in VARIANTS}
    for spec in args.variant:
        name, _, overrides = spec.partition("=")
        variants[name] = overrides.split(",")
    unknown = [name for name in args.variants if name not in variants]
    if unknown:
        sys.exit(f"--variants: unknown {unknown}; known: {sorted(VARIANTS)} or one given with --variant")
    # Interleaved: each seed's runs of every variant and task before the next seed's.
    jobs = [(v, task, seed) for seed in args.seeds for task in args.tasks for v in variants]
    results: list[Result] = []
    at_once = 2 if args.ranks == 1 else 1
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(at_once) as pool:
        futures = [
            pool.submit(run, v, variants[v], task, seed, Path(tmp), args.ranks) for v, task, seed in jobs
        ]
        for future in futures:
            results.append(future.result())
            print(json.dumps(asdict(results[-1])), flush=True)
    print("| variant | " + " | ".join(args.tasks) + " | all |")
    print("| --- |" + " --- |" * (len(args.tasks) + 1))
    for v in variants:
        cells = []
        for task in args.tasks:
            mine = [r for r in results if r.variant == v and r.task == task]
            bests = ", ".join(f"{r.best:.2f}" for r in mine)
            cells.append(f"{sum(r.passed for r in mine)}/{len(mine)} (best {bests})")
        everything = [r for r in results if r.variant == v]
        print(f"| {v} | " + " | ".join(cells) + f" | {sum(r.passed for r in everything)}/{len(everything)} |")
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))


if __name__ == "__main__":
    main()
