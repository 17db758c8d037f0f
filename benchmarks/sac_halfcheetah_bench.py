"""SAC on HalfCheetah-v5 for a fixed budget against SB3's SAC: the mean of each run's last 10 evaluations.

``configs/halfcheetah_sac.yaml`` and SB3's SAC at the same settings (rl-zoo's HalfCheetah
hyperparameters: SB3's defaults with ``learning_starts`` 10,000) train for ``--steps`` env steps,
evaluated alike every 1,000 env steps on 10 deterministic episodes of fixed seeds: distrl's stop
check at a return no run reaches (so it never stops a run), SB3's ``EvalCallback`` on the same seeds.
A seed's distrl run and SB3 run go side by side, one torch thread each (2 cores): this measures
returns, not speed. Goal (issue 41): distrl's mean over seeds of the last-10-eval means is at least
SB3's mean minus one standard deviation.

Usage: python benchmarks/sac_halfcheetah_bench.py [--seeds 1 2 3] [--steps 100000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from cartpole_bench import StopRule, ensure_sb3, metrics_rows, timed
from sb3_peer_bench import sb3_learn

from distrl.config.run import load_config
from distrl.runners.loop import STOP_CHECK_SEED_OFFSET

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "halfcheetah_sac.yaml"
SB3_MODEL = "SAC('MlpPolicy', env, learning_starts=10_000, seed=seed, verbose=0)"
EVAL_EVERY = 1_000
LAST_EVALS = 10
NEVER = 1e12  # a stop return no run reaches: the stop check is then a periodic evaluation


def distrl_checks(run_dir: Path, seed: int, steps: int) -> list[float]:
    command = [sys.executable, "-m", "distrl.train", "--config", str(CONFIG), "--run-dir", str(run_dir),
               "--overwrite", "--seed", str(seed), "log.tensorboard=false", f"train.total_steps={steps}",
               f"train.stop_return={NEVER}", f"train.stop_check_every={EVAL_EVERY}",
               "train.stop_confirm_episodes=0"]  # fmt: skip
    timed(command)
    return [row["stop_check_return"] for row in metrics_rows(run_dir) if "stop_check_return" in row]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=100_000)
    args = parser.parse_args()
    cfg = load_config(CONFIG)
    rule = StopRule(target=NEVER, every_env_steps=EVAL_EVERY, episodes=cfg.eval.episodes,
                    first_seed=cfg.eval.seed + STOP_CHECK_SEED_OFFSET, confirm_episodes=0)  # fmt: skip
    sb3 = ensure_sb3()
    checks: dict[str, list[list[float]]] = {"distrl": [], "SB3": []}
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:
            with ThreadPoolExecutor(1) as peer:  # SB3 beside distrl, each on a core
                sb3_run = peer.submit(sb3_learn, sb3, cfg.env.id, SB3_MODEL, 1, args.steps, rule,
                                      Path(tmp) / f"sb3-{seed}", seed)  # fmt: skip
                checks["distrl"].append(distrl_checks(Path(tmp) / f"distrl-{seed}", seed, args.steps))
                checks["SB3"].append(sb3_run.result()["check_returns"])
            last = {name: statistics.mean(runs[-1][-LAST_EVALS:]) for name, runs in checks.items()}
            print(
                f"seed {seed}: last-{LAST_EVALS} mean, distrl {last['distrl']:.0f}, SB3 {last['SB3']:.0f}",
                flush=True,
            )
    print(f"\n## SAC on HalfCheetah-v5, {args.steps:,} env steps: mean return of the last {LAST_EVALS} "
          f"evaluations ({cfg.eval.episodes} greedy episodes every {EVAL_EVERY:,} steps)\n")  # fmt: skip
    print("| trainer | seeds | last-10 mean per seed | mean | std | evaluations per run |")
    print("| --- | --- | --- | --- | --- | --- |")
    summary = {}
    for name, runs in checks.items():
        lasts = [statistics.mean(run[-LAST_EVALS:]) for run in runs]
        summary[name] = (statistics.mean(lasts), statistics.stdev(lasts) if len(lasts) > 1 else 0.0)
        per_seed = " / ".join(f"{v:.0f}" for v in lasts)
        print(f"| {name} | {args.seeds} | {per_seed} | {summary[name][0]:.0f} | {summary[name][1]:.0f} "
              f"| {len(runs[0])} |")  # fmt: skip
    bar = summary["SB3"][0] - summary["SB3"][1]
    met = "met" if summary["distrl"][0] >= bar else "NOT met"
    print(f"\nGoal distrl mean >= SB3 mean - 1 std ({bar:.0f}): **{met}**")


if __name__ == "__main__":
    main()
