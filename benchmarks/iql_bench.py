"""Offline IQL on logged Pendulum-v1 data: distrl against d3rlpy's IQL, side by side.

The data: a SAC policy trained by ``configs/pendulum_sac.yaml``, then ``distrl collect`` of
``--rows`` transitions half by that policy and half uniformly random (``epsilon-greedy:RUN:0.5``),
and ten times as many for the memory part. For each seed, interleaved, one torch thread each:
  * distrl's ``configs/pendulum_iql.yaml`` for ``--steps`` gradient steps (no early stop), then
    ``distrl eval`` (10 deterministic episodes on eval.seed's seeds);
  * d3rlpy 2.8.1's IQL (``d3rlpy_iql.py``, in its own venv) with the same hyperparameters and
    steps, evaluated on the same seeds.
Training samples per second: distrl's per-iteration rate after the first iteration, d3rlpy's after
as many steps. Peak memory: the whole process (``peak_rss.py``) training 200 steps on the data and
on ten times the data.

With ``--trace-every K`` both trainers also check their greedy policy every K gradient steps
(``eval.episodes`` episodes on distrl's stop-check seeds) and report, per interval, the means of
what distrl's IQL logs: V, the advantage, its batch maximum, the policy's weight and the share
of weights clipped; the table then shows each seed's checks and the samples/s column is
not a speed comparison (d3rlpy computes its statistics twice).

Usage: python benchmarks/iql_bench.py [--seeds 1 2 3] [--steps 5000] [--rows 100000] [--data-dir DIR]
       [--trace-every K] [--set algo.temperature=1.0 ...]
d3rlpy is installed into benchmarks/.d3rlpy-venv on first use (one pip command, torch pinned).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from cartpole_bench import env_without_launcher, metrics_rows, run_timed
from offline_bench import ensure_d3rlpy

from distrl.config.run import load_config
from distrl.runners.loop import STOP_CHECK_SEED_OFFSET

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CONFIG = REPO / "configs" / "pendulum_iql.yaml"
SAC_CONFIG = REPO / "configs" / "pendulum_sac.yaml"
MEMORY_STEPS = 200


def logged_data(data_dir: Path, rows: int) -> Path:
    """``rows`` transitions logged half by a trained SAC policy (trained once per ``data_dir``)."""
    sac = data_dir / "sac"
    if not (sac / "checkpoints").exists():
        run_timed([sys.executable, "-m", "distrl.train", "--config", str(SAC_CONFIG), "--run-dir", str(sac),
                   "--overwrite", "log.tensorboard=false"])  # fmt: skip
    path = data_dir / f"mixed-{rows}"
    if not path.exists():
        policy = f"epsilon-greedy:{sac}:0.5"
        run_timed([sys.executable, "-m", "distrl", "collect", "--env", "Pendulum-v1",
                   "--steps", str(rows), "--policy", policy, "--out", str(path)])  # fmt: skip
    return path


def hyperparameters(seed: int, overrides: list[str]) -> dict:
    cfg = load_config(CONFIG, overrides)
    algo = cfg.algo
    return {
        "seed": seed, "batch_size": algo.batch_size, "learning_rate": algo.learning_rate, "gamma": algo.gamma,
        "tau": algo.tau, "expectile": algo.expectile, "temperature": algo.temperature,
        "max_weight": algo.max_weight, "adam_eps": algo.adam_eps,
        "actor_cosine_decay": algo.actor_cosine_decay, "hidden_sizes": cfg.model.hidden_sizes,
        "activation": cfg.model.activation, "action_low": [-2.0], "action_high": [2.0], "env_id": cfg.env.id,
        "eval_seed": cfg.eval.seed, "check_seed": cfg.eval.seed + STOP_CHECK_SEED_OFFSET,
        "check_episodes": cfg.eval.episodes,
    }  # fmt: skip


TRACED = ("v_mean", "advantage_mean", "advantage_max", "policy_weight", "policy_weight_clipped")
"""What both trainers report per trace interval (distrl's IQL logs them every iteration)."""


def distrl_run(
    data: Path,
    run_dir: Path,
    seed: int,
    steps: int,
    evaluate: bool,
    overrides: list[str],
    rss: Path | None = None,
    trace_every: int = 0,
) -> dict:
    algo = load_config(CONFIG, overrides).algo
    batch = algo.batch_size
    gradient_steps = trace_every or min(steps, algo.gradient_steps)
    # A trace checks every iteration against a return Pendulum cannot reach, so it never stops.
    stop = ["train.stop_return=1", "train.stop_check_every=1"] if trace_every else ["train.stop_return=null"]
    command = ["-m", "distrl.train", "--config", str(CONFIG), "--data", str(data), "--run-dir", str(run_dir),
               "--overwrite", "--seed", str(seed), "--total-steps", str(steps * batch), *stop,
               "log.tensorboard=false", *overrides, f"algo.gradient_steps={gradient_steps}"]  # fmt: skip
    prefix = [sys.executable] if rss is None else [sys.executable, str(HERE / "peak_rss.py"), str(rss)]
    wall_s, _ = run_timed([*prefix, *command])
    rows = metrics_rows(run_dir)
    result = {"wall_s": wall_s, "samples_per_s": statistics.median(r["sps"] for r in rows[1:] or rows)}
    if trace_every:
        # An epoch's short last batch can leave a last iteration of a few steps: its check (the
        # final policy's) stands for the last point, its few steps' statistics do not.
        points: dict[int, dict] = {}
        for row in rows:
            step = trace_every * round(row["global_step"] / batch / trace_every)
            points.setdefault(step, {key: row[key] for key in TRACED})["check_return"] = row[
                "stop_check_return"
            ]
        result["trace"] = [{"step": step, **point} for step, point in points.items()]
    if evaluate:
        _, stdout = run_timed(
            [sys.executable, "-m", "distrl", "eval", "--checkpoint", str(run_dir), "--json"]
        )
        result["eval_return"] = json.loads(stdout)["return_mean"]
    return result


def d3rlpy_run(python: Path, data: Path, out: Path, seed: int, steps: int, evaluate: bool,
               overrides: list[str], rss: Path | None = None, trace_every: int = 0) -> dict:  # fmt: skip
    eval_episodes = load_config(CONFIG, overrides).eval.episodes if evaluate else 0
    hyper = json.dumps(hyperparameters(seed, overrides))
    command = [str(HERE / "d3rlpy_iql.py"), "--data", str(data), "--steps", str(steps),
               "--warmup-steps", str(min(steps // 5, 500)), "--hyper", hyper,
               "--eval-episodes", str(eval_episodes), "--out", str(out),
               "--trace-every", str(trace_every)]  # fmt: skip
    prefix = [str(python)] if rss is None else [str(python), str(HERE / "peak_rss.py"), str(rss)]
    subprocess.run([*prefix, *command], check=True, env=env_without_launcher())
    return json.loads(out.read_text())


def peak_mib(rss_dir: Path) -> float:
    return json.loads((rss_dir / "rank-0.json").read_text())["peak_rss_kib"] / 1024


def print_traces(runs: dict[str, list[dict]], seeds: list[int]) -> None:
    """Each seed's greedy checks over training, then the statistics where the checks differ."""
    steps = [point["step"] for point in next(iter(runs.values()))[0]["trace"]]
    print("\n| trainer | seed | " + " | ".join(f"check at {step:,}" for step in steps) + " | final eval |")
    print("| --- | --- | " + "--- | " * len(steps) + "--- |")
    for name, results in runs.items():
        for seed, result in zip(seeds, results, strict=True):
            checks = " | ".join(f"{point['check_return']:.0f}" for point in result["trace"])
            print(f"| {name} | {seed} | {checks} | {result['eval_return']:.0f} |")
    print("\n| trainer | seed | step | " + " | ".join(TRACED) + " |")
    print("| --- | --- | --- | " + "--- | " * len(TRACED))
    for name, results in runs.items():
        for seed, result in zip(seeds, results, strict=True):
            for point in result["trace"]:
                stats = " | ".join(f"{point[key]:.3g}" for key in TRACED)
                print(f"| {name} | {seed} | {point['step']:,} | {stats} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=5000, help="gradient steps per run")
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--trace-every", type=int, default=0, help="gradient steps between trace points")
    parser.add_argument("--json-out", type=Path, default=None, help="also write every run's results here")
    parser.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                        help="distrl config overrides; d3rlpy gets the IQL settings they change")  # fmt: skip
    args = parser.parse_args()
    d3rlpy = ensure_d3rlpy(HERE / ".d3rlpy-venv")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        data_dir = args.data_dir or tmp / "data"
        data = logged_data(data_dir, args.rows)
        runs: dict[str, list[dict]] = {"distrl IQL, 1 rank": [], "d3rlpy IQL": []}
        for seed in args.seeds:  # interleaved: the machine is noisy
            runs["distrl IQL, 1 rank"].append(
                distrl_run(
                    data,
                    tmp / f"distrl-{seed}",
                    seed,
                    args.steps,
                    True,
                    args.set,
                    trace_every=args.trace_every,
                )
            )
            runs["d3rlpy IQL"].append(
                d3rlpy_run(
                    d3rlpy,
                    data,
                    tmp / f"d3rlpy-{seed}.json",
                    seed,
                    args.steps,
                    True,
                    args.set,
                    trace_every=args.trace_every,
                )
            )
        memory: dict[str, list[float]] = {"distrl IQL, 1 rank": [], "d3rlpy IQL": []}
        for rows_path in () if args.trace_every else (data, logged_data(data_dir, 10 * args.rows)):
            rss = tmp / f"rss-distrl-{rows_path.name}"
            distrl_run(rows_path, tmp / "distrl-memory", 1, MEMORY_STEPS, False, args.set, rss)
            memory["distrl IQL, 1 rank"].append(peak_mib(rss))
            rss = tmp / f"rss-d3rlpy-{rows_path.name}"
            d3rlpy_run(d3rlpy, rows_path, tmp / "d3rlpy-memory.json", 1, MEMORY_STEPS, False, args.set, rss)
            memory["d3rlpy IQL"].append(peak_mib(rss))
    if args.json_out:
        args.json_out.write_text(json.dumps({"seeds": args.seeds, "runs": runs}))
    if args.trace_every:
        print_traces(runs, args.seeds)
        return
    batch = load_config(CONFIG).algo.batch_size
    print(f"\n## IQL on {args.rows:,} logged Pendulum-v1 transitions (half a trained SAC policy, half "
          f"random): {args.steps:,} gradient steps of batch {batch}, seeds {args.seeds}\n")  # fmt: skip
    print("| trainer | training samples/s per seed | median | eval return per seed | mean eval return "
          f"| peak RSS MiB, {args.rows:,} rows | peak RSS MiB, {10 * args.rows:,} rows |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, results in runs.items():
        speeds = " / ".join(f"{r['samples_per_s']:,.0f}" for r in results)
        median = statistics.median(r["samples_per_s"] for r in results)
        returns = " / ".join(f"{r['eval_return']:.0f}" for r in results)
        mean = statistics.mean(r["eval_return"] for r in results)
        small, large = memory[name]
        print(f"| {name} | {speeds} | {median:,.0f} | {returns} | {mean:.0f} | {small:.0f} | {large:.0f} |")
    ratio = statistics.median(r["samples_per_s"] for r in runs["distrl IQL, 1 rank"]) / statistics.median(
        r["samples_per_s"] for r in runs["d3rlpy IQL"]
    )
    print(f"\ndistrl / d3rlpy training samples/s, medians: **{ratio:.2f}x**")


if __name__ == "__main__":
    main()
