"""CartPole-v1 benchmark: time to solve, throughput, 1 vs 2 ranks, and Stable-Baselines3 side by side.

Prints, for the same machine in the same run:
  * wall time of the whole training process (start to saved policy) for distrl on 1 rank and
    on 2 ranks (torchrun), and for SB3 PPO with rl-zoo's tuned CartPole hyperparameters; each
    saved policy is then evaluated (10 deterministic episodes) outside the timed part;
  * env steps per second of the whole training loop for 1 and 2 ranks at a fixed step budget,
    their ratio, and the share of iteration time spent in the gradient all-reduce.

Usage: python benchmarks/cartpole_bench.py [--seeds 1 2 3] [--no-sb3] [--repeats 3]
SB3 is installed into benchmarks/.sb3-venv (torch pinned first) on first use.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "cartpole_ppo.yaml"
SB3_VENV = REPO / "benchmarks" / ".sb3-venv"
THROUGHPUT_STEPS = 200_000
PER_RANK_ENVS = 32
WEAK_SCALING = ["env.num_envs=null", f"env.num_envs_per_rank={PER_RANK_ENVS}"]
"""Throughput runs give every rank the config's 32 envs (a fixed budget per process); the
time-to-solve runs use the shipped config as it is (32 envs summed over the ranks)."""
STRAGGLER_CUT = "train.straggler_threshold=0.5"

SB3_SCRIPT = """
import sys, time
import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.evaluation import evaluate_policy

def linear(start):
    return lambda progress: progress * start

torch.set_num_threads(1)
seed, out = int(sys.argv[1]), sys.argv[2]
# rl-zoo (hyperparams/ppo.yml) CartPole-v1: 8 envs, 1e5 steps.
env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
            n_epochs=20, ent_coef=0.0, learning_rate=linear(0.001), clip_range=linear(0.2),
            seed=seed, verbose=0)
model.learn(total_timesteps=100_000)
model.save(out)
"""

SB3_EVAL = """
import sys
import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
torch.set_num_threads(1)
model = PPO.load(sys.argv[1])
returns = []
for i in range(10):
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=10_000 + i)
    done, total = False, 0.0
    while not done:
        action, _ = model.predict(obs, deterministic=True)
        obs, r, term, trunc, _ = env.step(action)
        total += r
        done = term or trunc
    returns.append(total)
print(float(np.mean(returns)))
"""


def env_without_launcher() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env_without_launcher())
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if not line.startswith("W")]
        sys.exit(f"failed (exit {done.returncode}): {' '.join(cmd)}\n" + "\n".join(lines[-40:]))
    return time.perf_counter() - start


def distrl_cmd(ranks: int, run_dir: Path, *args: str) -> list[str]:
    train = ["--config", str(CONFIG), "--run-dir", str(run_dir), "--overwrite", "log.tensorboard=false"]
    if ranks == 1:
        return [sys.executable, "-m", "distrl.train", *train, *args]
    return [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={ranks}",
        "--master_addr=127.0.0.1", "--master_port=29533",
        "-m", "distrl.train", *train, *args, "--distributed",
    ]  # fmt: skip


def distrl_eval(run_dir: Path) -> float:
    out = subprocess.run(
        [sys.executable, "-m", "distrl", "eval", "--checkpoint", str(run_dir), "--json"],
        check=True, capture_output=True, text=True, env=env_without_launcher(),
    )  # fmt: skip
    return json.loads(out.stdout)["return_mean"]


def ensure_sb3() -> Path:
    python = SB3_VENV / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(SB3_VENV)], check=True)
        pip = [str(SB3_VENV / "bin" / "pip"), "install", "-q"]
        subprocess.run([*pip, "torch==2.13.0"], check=True)  # pinned first: the local CPU wheel
        subprocess.run([*pip, "stable-baselines3", "gymnasium[classic-control]"], check=True)
    return python


def time_to_solve(seeds: list[int], tmp: Path, use_sb3: bool) -> dict[str, list[tuple[float, float]]]:
    """(wall seconds, eval return) per seed for each trainer."""
    results: dict[str, list[tuple[float, float]]] = {"distrl 1 rank": [], "distrl 2 ranks": []}
    if use_sb3:
        results["SB3 PPO (rl-zoo)"] = []
        sb3 = ensure_sb3()
    for seed in seeds:
        for ranks in (1, 2):
            run_dir = tmp / f"distrl{ranks}-{seed}"
            wall = timed(distrl_cmd(ranks, run_dir, "--seed", str(seed)))
            results[f"distrl {ranks} rank{'s' if ranks > 1 else ''}"].append((wall, distrl_eval(run_dir)))
        if use_sb3:
            out = tmp / f"sb3-{seed}"
            wall = timed([str(sb3), "-c", SB3_SCRIPT, str(seed), str(out)])
            ret = subprocess.run(
                [str(sb3), "-c", SB3_EVAL, f"{out}.zip"], check=True, capture_output=True, text=True
            ).stdout
            results["SB3 PPO (rl-zoo)"].append((wall, float(ret)))
    return results


def run_metrics(run_dir: Path) -> dict[str, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steady = rows[len(rows) // 5 :]  # skip warm-up
    return {
        "sps": rows[-1]["sps"],
        "grad_sync_share": statistics.mean(r["grad_sync_share"] for r in steady),
        "rollout_fraction": statistics.mean(r["rollout_fraction"] for r in steady),
    }


def independent_sps(tmp: Path, n: int, args: list[str]) -> float:
    """Summed env steps/s of ``n`` unconnected 1-rank trainings run at the same time."""
    dirs = [tmp / f"solo{i}" for i in range(n)]
    procs = [
        subprocess.Popen(
            distrl_cmd(1, d, *args),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env_without_launcher(),
        )
        for d in dirs
    ]
    for p in procs:
        p.wait()
    return sum(run_metrics(d)["sps"] for d in dirs)


def throughput(tmp: Path, rollout_steps: int, repeats: int) -> dict[str, dict[str, float]]:
    """Fixed budget of THROUGHPUT_STEPS per process, no early stop: 1 rank, 2 DD-PPO ranks (also
    with the straggler cut-off, which stops the later rank collecting once the other is done),
    and 2 independent 1-rank processes side by side (the machine's own ceiling for 2 processes).
    The three are interleaved ``repeats`` times and the medians reported: the machine is noisy."""
    args = [
        "train.stop_return=null",
        "train.device=cpu",
        f"algo.rollout_steps={rollout_steps}",
        *WEAK_SCALING,
    ]
    runs: dict[str, list[dict[str, float]]] = {}
    for _ in range(repeats):
        one = tmp / f"sps1-{rollout_steps}"
        timed(distrl_cmd(1, one, "--total-steps", str(THROUGHPUT_STEPS), *args))
        runs.setdefault("1 rank", []).append(run_metrics(one))
        two = tmp / f"sps2-{rollout_steps}"
        timed(distrl_cmd(2, two, "--total-steps", str(2 * THROUGHPUT_STEPS), *args))
        runs.setdefault("2 ranks (DD-PPO)", []).append(run_metrics(two))
        cut = tmp / f"sps2cut-{rollout_steps}"
        timed(distrl_cmd(2, cut, "--total-steps", str(2 * THROUGHPUT_STEPS), *args, STRAGGLER_CUT))
        runs.setdefault(f"2 ranks, {STRAGGLER_CUT}", []).append(run_metrics(cut))
        solo_sps = independent_sps(
            tmp / f"solo-{rollout_steps}", 2, ["--total-steps", str(THROUGHPUT_STEPS), *args]
        )
        solo = {
            "sps": solo_sps,
            "grad_sync_share": 0.0,
            "rollout_fraction": 1.0,
        }
        runs.setdefault("2 independent 1-rank processes (sum)", []).append(solo)
    return {
        name: {key: statistics.median(r[key] for r in rows) for key in rows[0]} for name, rows in runs.items()
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--no-sb3", action="store_true")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved throughput repeats")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, {sys.platform}, python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        solve = time_to_solve(args.seeds, tmp, not args.no_sb3)
        print("\n## Time to a saved policy (whole process, start to checkpoint), then 10-episode eval")
        print("| trainer | seeds | wall s per seed | median wall s | eval returns |")
        print("| --- | --- | --- | --- | --- |")
        for name, runs in solve.items():
            walls = " / ".join(f"{w:.1f}" for w, _ in runs)
            evals = " / ".join(f"{r:.0f}" for _, r in runs)
            median = statistics.median(w for w, _ in runs)
            print(f"| {name} | {args.seeds} | {walls} | {median:.1f} | {evals} |")
        if not args.no_sb3:
            ratio = statistics.median(w for w, _ in solve["SB3 PPO (rl-zoo)"]) / statistics.median(
                w for w, _ in solve["distrl 1 rank"]
            )
            print(f"\nSB3 median wall / distrl 1-rank median wall: {ratio:.2f}x")
        for rollout_steps in (16, 128):
            tput = throughput(tmp, rollout_steps, args.repeats)
            steps = f"{THROUGHPUT_STEPS} env steps per process, median of {args.repeats} interleaved runs"
            print(f"\n## Throughput, algo.rollout_steps={rollout_steps}, {steps}")
            print("| processes | env steps/s | gradient all-reduce share of iteration | rollout collected |")
            print("| --- | --- | --- | --- |")
            for name, row in tput.items():
                share, collected = 100 * row["grad_sync_share"], 100 * row["rollout_fraction"]
                print(f"| {name} | {row['sps']:.0f} | {share:.1f}% | {collected:.0f}% |")
            single = tput["1 rank"]["sps"]
            ddppo = tput["2 ranks (DD-PPO)"]["sps"] / single
            ceiling = tput["2 independent 1-rank processes (sum)"]["sps"] / single
            print(
                f"\n2 ranks / 1 rank: {ddppo:.2f}x; 2 independent processes / 1: {ceiling:.2f}x; "
                f"DD-PPO reaches {100 * ddppo / ceiling:.0f}% of the machine's 2-process ceiling"
            )


if __name__ == "__main__":
    main()
