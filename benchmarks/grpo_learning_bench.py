"""GRPO learning from random weights: the shipped addition config on 1 learner, 2 learners under
torchrun, 1 learner under Ray with 2 verifier workers, and asynchronous GRPO (1 learner under Ray
with 1 generation worker one step ahead, with and without the importance-sampling correction),
seeds 1..3 each.

Every run trains ``configs/grpo_addition_cpu.yaml`` as shipped (its stop rule: the held-out exact
match of the stop check reaches ``train.stop_return``, confirmed on more prompts; its step
budget as the cap) and is judged afterwards by ``distrl eval`` on ``--eval-prompts`` held-out
prompts (greedy exact match). Reported per run: whether the stop check passed, completions and
wall seconds until the run ended (the process, start-up included; for Ray the local Ray instance's
start too), completions per second of the training loop (completions over the loop's seconds),
and the final held-out accuracy. Runs go one at a time (2 learners share the 2 cores).

Usage: python benchmarks/grpo_learning_bench.py [--config configs/grpo_addition_cpu.yaml]
       [--contenders 1 torchrun2 ray ray-async ray-async-uncorrected] [--seeds 1 2 3]
       [--eval-prompts 1000] [--json out.json]
       [--set KEY=VALUE ...]   (overrides for every run: algo.entropy_target=null, say)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cartpole_bench import metrics_rows, run_timed  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CONTENDERS = {
    "1": ["-m", "distrl.train"],
    "torchrun2": [
        "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2", "--master_addr=127.0.0.1",
        "--master_port=29533", "-m", "distrl.train",
    ],
    "ray": ["-m", "distrl", "train", "--launcher", "ray"],
    "ray-async": ["-m", "distrl", "train", "--launcher", "ray"],
    "ray-async-uncorrected": ["-m", "distrl", "train", "--launcher", "ray"],
}  # fmt: skip
ASYNC = ["workers.generation=1", "workers.cpus_per_generation=1", "collect.lag=1", "cluster.cpus_per_node=2"]
"""Asynchronous GRPO: one generation worker one step ahead of the one learner, a core each."""
EXTRA = {
    "torchrun2": ["--distributed"],
    "ray": ["workers.verifier=2", "workers.cpus_per_verifier=0.5", "cluster.cpus_per_node=2"],
    "ray-async": ASYNC,
    "ray-async-uncorrected": [*ASYNC, "algo.importance_sampling_correction=false"],
}
"""What each contender adds after the config's arguments."""


@dataclass
class Result:
    contender: str
    seed: int
    passed: bool
    completions: int
    wall_s: float
    train_s: float
    heldout_exact_match: float


def run(
    contender: str, config: Path, seed: int, run_dir: Path, eval_prompts: int, overrides: list[str]
) -> Result:
    args = ["--config", str(config), "--run-dir", str(run_dir), "--overwrite", "--seed", str(seed)]
    args += ["log.progress=false", "log.tensorboard=false", *EXTRA.get(contender, []), *overrides]
    wall_s, stdout = run_timed([sys.executable, *CONTENDERS[contender], *args], REPO)
    last = metrics_rows(run_dir)[-1]
    evaluated = [sys.executable, "-m", "distrl", "eval", "--checkpoint", str(run_dir), "--json"]
    _, report = run_timed([*evaluated, "--episodes", str(eval_prompts)], REPO)
    return Result(
        contender,
        seed,
        passed="stopped: the evaluation check passed" in stdout,
        completions=last["global_step"],
        wall_s=wall_s,
        train_s=last["time_s"],
        heldout_exact_match=json.loads(report)["return_mean"],
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=REPO / "configs" / "grpo_addition_cpu.yaml")
    parser.add_argument("--contenders", nargs="+", default=list(CONTENDERS), choices=list(CONTENDERS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--eval-prompts", type=int, default=1000)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--set", nargs="+", default=[], metavar="KEY=VALUE", help="overrides for every run")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:  # interleaved: every contender's seed 1, then seed 2, ...
            for contender in args.contenders:
                run_dir = Path(tmp) / f"{contender}-{seed}"
                result = run(contender, args.config, seed, run_dir, args.eval_prompts, args.set)
                print(json.dumps(asdict(result)), flush=True)
                results.append(result)
    print(
        "| contender | passed | completions per seed | wall s per seed | median wall s "
        "| median completions/s (loop) | held-out acc. |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for contender in args.contenders:
        mine = [r for r in results if r.contender == contender]
        print(
            f"| {contender} | {sum(r.passed for r in mine)}/{len(mine)} | "
            f"{', '.join(str(r.completions) for r in mine)} | {', '.join(f'{r.wall_s:.0f}' for r in mine)} | "
            f"{statistics.median(r.wall_s for r in mine):.0f} | "
            f"{statistics.median(r.completions / r.train_s for r in mine):,.0f} | "
            f"{', '.join(f'{r.heldout_exact_match:.3f}' for r in mine)} |"
        )
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=1))


if __name__ == "__main__":
    main()
