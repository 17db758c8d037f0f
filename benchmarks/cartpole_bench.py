"""CartPole-v1 benchmark: time to solve against SB3, CleanRL side by side, throughput on 1 vs 2 ranks.

Prints markdown tables for BENCHMARKS.md, measured on the same machine in the same run:
  * ``solve``: wall time of the whole training process (start to saved policy) and env steps at
    the stop, for distrl and for SB3 PPO with rl-zoo's tuned CartPole hyperparameters, both
    stopped by the same rule (distrl's stop check: a deterministic evaluation on fixed seeds every
    so many env steps, stop once its mean reaches the target; SB3 through ``EvalCallback`` +
    ``StopTrainingOnRewardThreshold``). distrl also runs as shipped (a passing check confirmed on
    20 more episodes, which SB3's callback cannot do) and on 2 ranks. Each saved policy is then
    evaluated (10 deterministic episodes) outside the timed part;
  * ``cleanrl``: CleanRL's own ``ppo.py`` (its package, in its own venv) with its defaults, and
    distrl with the same hyperparameters, 500k env steps each: whole-process wall time, env steps
    per second of the whole loop and the step at which the running mean of the last 10 training
    episodes first reached 475;
  * ``throughput``: env steps per second of the whole training loop for 1 and 2 ranks at a fixed
    step budget, their ratio, and the share of iteration time spent in the gradient all-reduce.

Usage: python benchmarks/cartpole_bench.py [--only solve cleanrl throughput] [--seeds 1 2 3]
       [--no-sb3] [--repeats 3]
SB3 and CleanRL are installed into benchmarks/.sb3-venv and benchmarks/.cleanrl-venv on first use
(torch pinned first: the CPU wheel on local disk; a later package pulling torch would fetch a
CUDA build).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from distrl.config.run import load_config
from distrl.io.metrics import METRICS_FILE
from distrl.runners.loop import STOP_CHECK_SEED_OFFSET

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "cartpole_ppo.yaml"
SB3_VENV = REPO / "benchmarks" / ".sb3-venv"
CLEANRL_VENV = REPO / "benchmarks" / ".cleanrl-venv"
VENV_READY = ".installed"
"""Written into a benchmark venv once everything is installed: a failed install is retried."""
THROUGHPUT_STEPS = 200_000
PER_RANK_ENVS = 32
WEAK_SCALING = ["env.num_envs=null", f"env.num_envs_per_rank={PER_RANK_ENVS}"]
"""Throughput runs give every rank the config's 32 envs (a fixed budget per process); the
time-to-solve runs use the shipped config as it is (32 envs summed over the ranks)."""
STRAGGLER_CUT = "train.straggler_threshold=0.5"

SB3_NUM_ENVS = 8
SB3_TOTAL_STEPS = 100_000
"""rl-zoo's budget for CartPole-v1 PPO; its linear schedules run over it."""
SB3_ROW = "SB3 PPO (rl-zoo), EvalCallback + StopTrainingOnRewardThreshold"
DISTRL_SAME_RULE_ROW = "distrl 1 rank, same rule as SB3 (`train.stop_confirm_episodes=0`)"
DISTRL_SHIPPED_ROW = "distrl 1 rank, shipped config (a passing check confirmed on 20 more episodes)"
DISTRL_SOLVE_ROWS = {
    DISTRL_SAME_RULE_ROW: (1, ["train.stop_confirm_episodes=0"]),
    DISTRL_SHIPPED_ROW: (1, []),
    "distrl 2 ranks (torchrun), shipped config": (2, []),
}
"""Row name -> (ranks, overrides of the shipped config) for the time-to-solve runs."""

CLEANRL_RELEASE = "cleanrl==1.2.0"
CLEANRL_STEPS = 500_000
CLEANRL_RETURN_WINDOW = 10
CLEANRL_SOLVED_RETURN = 475.0
CLEANRL_HYPERPARAMETERS = [
    "env.num_envs=4",
    "algo.rollout_steps=128",
    "algo.minibatch_size=128",  # a global sample count: 512 samples per update / 4 minibatches
    "algo.update_epochs=4",
    "algo.learning_rate=2.5e-4",
    "algo.anneal_lr=true",
    "algo.gamma=0.99",
    "algo.gae_lambda=0.95",
    "algo.clip_coef=0.2",
    "algo.clip_value_loss=true",
    "algo.entropy_coef=0.01",
    "algo.value_coef=0.5",
    "algo.max_grad_norm=0.5",
    "algo.adam_eps=1e-5",
    "algo.normalize_advantages=true",
    "model.hidden_sizes=[64,64]",
    "model.activation=tanh",
    "train.stop_return=null",
    f"train.return_window={CLEANRL_RETURN_WINDOW}",
    "log.tensorboard=true",  # CleanRL writes TensorBoard scalars every update too
]
"""CleanRL ppo.py's defaults as distrl overrides of the shipped CartPole config."""
CLEANRL_DIFFERENCES = """\
What still differs at these settings: CleanRL normalises advantages per minibatch of 128, distrl
over the whole 512-sample rollout; CleanRL (gym 0.23.1) treats the 500-step time limit as a
terminal state, distrl bootstraps truncated episodes from the value of their last observation;
CleanRL anneals the learning rate over 976 updates (499,712 env steps), distrl by env step over
500,000 (977 updates); CleanRL records only the first episode finishing at a step (its `break`)
and saves no model, distrl records every episode and writes a checkpoint every 50k env steps (in
a background thread). Both: one torch thread, TensorBoard scalars every update, SyncVectorEnv."""
CLEANRL_QUOTED_ROW = (
    "| CleanRL `ppo.py` defaults, **quoted from the issue author** (same machine kind, not measured "
    "in this run) | not stated | – | 78 | – | 6.6k | – | ~170k |"
)


SB3_SCRIPT = """
import json, sys
import gymnasium as gym
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import EvalCallback, StopTrainingOnRewardThreshold
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

class FixedSeed(gym.Wrapper):
    # Every reset replays one seed: each check plays the same episodes, as distrl's checks do.
    def __init__(self, env, seed):
        super().__init__(env)
        self.fixed_seed = seed

    def reset(self, *, seed=None, options=None):
        return self.env.reset(seed=self.fixed_seed, options=options)

def linear(start):
    return lambda progress: progress * start

torch.set_num_threads(1)
seed, out, num_envs, total_steps = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
target, check_every_calls, episodes, first_seed = (
    float(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
)
# rl-zoo (hyperparams/ppo.yml) CartPole-v1: 8 envs, 1e5 steps.
env = make_vec_env("CartPole-v1", n_envs=num_envs, seed=seed)
check_envs = DummyVecEnv(
    [lambda s=first_seed + i: Monitor(FixedSeed(gym.make("CartPole-v1"), s)) for i in range(episodes)]
)
check = EvalCallback(
    check_envs, callback_on_new_best=StopTrainingOnRewardThreshold(reward_threshold=target),
    n_eval_episodes=episodes, eval_freq=check_every_calls, deterministic=True, verbose=0,
)
model = PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
            n_epochs=20, ent_coef=0.0, learning_rate=linear(0.001), clip_range=linear(0.2),
            seed=seed, verbose=0)
model.learn(total_timesteps=total_steps, callback=check)
model.save(out)
stopped_by_rule = bool(check.best_mean_reward >= target)
print(json.dumps({"env_steps": model.num_timesteps, "stopped_by_rule": stopped_by_rule}))
"""

SB3_EVAL = """
import sys
import gymnasium as gym
import numpy as np
import torch
from stable_baselines3 import PPO
torch.set_num_threads(1)
model = PPO.load(sys.argv[1])
episodes, first_seed = int(sys.argv[2]), int(sys.argv[3])
returns = []
for i in range(episodes):
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=first_seed + i)
    done, total = False, 0.0
    while not done:
        action, _ = model.predict(obs, deterministic=True)
        obs, r, term, trunc, _ = env.step(action)
        total += r
        done = term or trunc
    returns.append(total)
print(float(np.mean(returns)))
"""

CLEANRL_EPISODE = re.compile(r"global_step=(\d+), episodic_return=\[?([-0-9.e+]+)")
CLEANRL_SPS = re.compile(r"^SPS: (\d+)", re.MULTILINE)


class CommandFailed(Exception):
    """A benchmarked command exited non-zero; the message ends with its last stderr lines."""


@dataclass(frozen=True)
class StopRule:
    """distrl's early-stop check as the shipped config sets it, counted in env steps."""

    target: float
    every_env_steps: int
    episodes: int
    first_seed: int
    confirm_episodes: int


@dataclass(frozen=True)
class SolveRun:
    wall_s: float
    env_steps: int
    eval_return: float
    stopped_by_rule: bool
    """False: the run used its whole step budget without passing a check."""


@dataclass(frozen=True)
class LoopRun:
    wall_s: float
    steps_per_s: float
    """Env steps per second of the whole training loop, as the trainer itself reports it."""
    solved_at_step: int | None
    """Env step at which the running mean of the last training episodes first reached the target."""


def env_without_launcher() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def run_timed(cmd: list[str], cwd: Path | None = None, src: Path | None = None) -> tuple[float, str]:
    """Wall seconds of the whole process and its stdout; raises CommandFailed on a non-zero exit.
    ``src``: run distrl from this ``src`` folder (another checkout's) instead of the installed one."""
    env = env_without_launcher()
    if src is not None:
        env["PYTHONPATH"] = str(src)
    start = time.perf_counter()
    done = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, cwd=cwd)
    wall_s = time.perf_counter() - start
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if not line.startswith("W")]
        raise CommandFailed(f"failed (exit {done.returncode}): {' '.join(cmd)}\n" + "\n".join(lines[-40:]))
    return wall_s, done.stdout


def timed(cmd: list[str]) -> float:
    """Wall seconds of the whole process; exits with the command's errors if it fails."""
    try:
        return run_timed(cmd)[0]
    except CommandFailed as exc:
        sys.exit(str(exc))


def distrl_cmd(ranks: int, run_dir: Path, *args: str, config: Path = CONFIG) -> list[str]:
    train = ["--config", str(config), "--run-dir", str(run_dir), "--overwrite", "log.tensorboard=false"]
    if ranks == 1:
        return [sys.executable, "-m", "distrl.train", *train, *args]
    return [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={ranks}",
        "--master_addr=127.0.0.1", "--master_port=29533",
        "-m", "distrl.train", *train, *args, "--distributed",
    ]  # fmt: skip


def distrl_eval(run_dir: Path) -> float:
    """``distrl eval`` of a run's policy, from the repository root (where ``examples`` imports)."""
    command = [sys.executable, "-m", "distrl", "eval", "--checkpoint", str(run_dir), "--json"]
    _, stdout = run_timed(command, REPO)
    return json.loads(stdout)["return_mean"]


def metrics_rows(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / METRICS_FILE).read_text().splitlines() if line.strip()]


def ensure_venv(venv: Path, *installs: Sequence[str]) -> Path:
    """A venv with torch==2.13.0 installed first (the CPU wheel on local disk: a later package
    pulling torch would fetch a CUDA build), then each of ``installs`` as one ``pip install``."""
    python = venv / "bin" / "python"
    if not (venv / VENV_READY).exists():
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        (venv / ".gitignore").write_text("*\n")  # as Python 3.13's venv does
        pip = [str(venv / "bin" / "pip"), "install", "-q"]
        for install in (["torch==2.13.0"], *installs):
            subprocess.run([*pip, *install], check=True)
        (venv / VENV_READY).write_text("")
    return python


def ensure_sb3() -> Path:
    return ensure_venv(SB3_VENV, ["stable-baselines3", "gymnasium[classic-control,mujoco]"])


def ensure_cleanrl() -> Path:
    """CleanRL's own package. Its last release declares Python < 3.11 (pip on 3.11 falls back to
    0.4.8, which has no CleanRL-style ppo.py), so it is installed without that check and without
    its dependency pins, then what its ppo.py imports: gym 0.23.1 (CleanRL's pin), tensorboard,
    a NumPy of gym 0.23's time, and pygame (gym 0.23's CartPole imports it; CleanRL's pin 2.1.0
    has no wheel for Python 3.11)."""
    return ensure_venv(
        CLEANRL_VENV,
        ["--no-deps", "--ignore-requires-python", CLEANRL_RELEASE],
        ["gym==0.23.1", "tensorboard>=2.10,<3", "numpy<2", "pygame"],
    )


def stop_rule() -> StopRule:
    cfg = load_config(CONFIG)
    if cfg.train.stop_return is None or cfg.env.num_envs is None:
        raise ValueError(f"{CONFIG} must set train.stop_return and env.num_envs")
    return StopRule(
        target=cfg.train.stop_return,
        every_env_steps=cfg.train.stop_check_every * cfg.env.num_envs * cfg.algo.rollout_steps,
        episodes=cfg.eval.episodes,
        first_seed=cfg.eval.seed + STOP_CHECK_SEED_OFFSET,
        confirm_episodes=cfg.train.stop_confirm_episodes,
    )


# --------------------------------------------------------------------------------- time to solve
def distrl_solve(ranks: int, run_dir: Path, seed: int, overrides: list[str], rule: StopRule) -> SolveRun:
    wall_s = timed(distrl_cmd(ranks, run_dir, "--seed", str(seed), *overrides))
    last = metrics_rows(run_dir)[-1]
    check = last.get("stop_check_return")
    return SolveRun(
        wall_s, last["global_step"], distrl_eval(run_dir), check is not None and check >= rule.target
    )


def sb3_solve(python: Path, out: Path, seed: int, rule: StopRule) -> SolveRun:
    if rule.every_env_steps % SB3_NUM_ENVS:
        raise ValueError(f"a check every {rule.every_env_steps} env steps is not a whole number of SB3 steps")
    # EvalCallback's eval_freq counts callback calls: one per step of all SB3_NUM_ENVS envs.
    check_every_calls = rule.every_env_steps // SB3_NUM_ENVS
    args = [SB3_NUM_ENVS, SB3_TOTAL_STEPS, rule.target, check_every_calls, rule.episodes, rule.first_seed]
    wall_s, stdout = run_timed([str(python), "-c", SB3_SCRIPT, str(seed), str(out), *map(str, args)])
    info = json.loads(stdout.splitlines()[-1])
    eval_cfg = load_config(CONFIG).eval
    evaluated = subprocess.run(
        [str(python), "-c", SB3_EVAL, f"{out}.zip", str(eval_cfg.episodes), str(eval_cfg.seed)],
        check=True, capture_output=True, text=True, env=env_without_launcher(),
    )  # fmt: skip
    return SolveRun(wall_s, info["env_steps"], float(evaluated.stdout), info["stopped_by_rule"])


def time_to_solve(seeds: list[int], tmp: Path, use_sb3: bool, rule: StopRule) -> dict[str, list[SolveRun]]:
    """Every trainer once per seed, interleaved (the machine is noisy)."""
    results: dict[str, list[SolveRun]] = {name: [] for name in DISTRL_SOLVE_ROWS}
    if use_sb3:
        results[SB3_ROW] = []
        sb3 = ensure_sb3()
    for seed in seeds:
        for index, (name, (ranks, overrides)) in enumerate(DISTRL_SOLVE_ROWS.items()):
            run_dir = tmp / f"solve{index}-{seed}"
            results[name].append(distrl_solve(ranks, run_dir, seed, overrides, rule))
        if use_sb3:
            results[SB3_ROW].append(sb3_solve(sb3, tmp / f"sb3-{seed}", seed, rule))
    return results


def print_time_to_solve(results: dict[str, list[SolveRun]], seeds: list[int], rule: StopRule) -> None:
    cfg = load_config(CONFIG)
    checks = f"{rule.every_env_steps // (cfg.env.num_envs * cfg.algo.rollout_steps)} updates"
    update = f"{cfg.env.num_envs} envs x {cfg.algo.rollout_steps} steps"
    print("\n## Time to a saved policy, distrl and SB3 stopped by the same rule")
    print(
        f"\nStop rule of SB3 and the first distrl row: every {rule.every_env_steps} env steps a "
        f"deterministic evaluation of {rule.episodes} episodes (seeds {rule.first_seed}-"
        f"{rule.first_seed + rule.episodes - 1}; distrl every {checks} of {update}, SB3 "
        f"`EvalCallback(eval_freq={rule.every_env_steps // SB3_NUM_ENVS}, "
        f"n_eval_episodes={rule.episodes}, deterministic=True)` with {SB3_NUM_ENVS} envs), and "
        f"training stops once its mean return reaches {rule.target:g} "
        f"(`StopTrainingOnRewardThreshold(reward_threshold={rule.target:g})`). The shipped distrl "
        f"rows use the same check but confirm a passing one on {rule.confirm_episodes} more "
        f"episodes (the mean over all {rule.episodes + rule.confirm_episodes} must still reach it), "
        f"which SB3's callback cannot. Budget when no check passes: distrl "
        f"{cfg.train.total_steps} env steps, SB3 {SB3_TOTAL_STEPS} (rl-zoo's). SB3 runs its "
        "check at the last env step of a rollout, before that rollout's update; distrl after it. "
        "Wall: the whole process, start to saved policy. Eval: 10 deterministic episodes of the "
        f"saved policy on seeds {cfg.eval.seed}-{cfg.eval.seed + cfg.eval.episodes - 1} (not timed)."
    )
    print(
        "\n| trainer | seeds | wall s per seed | median wall s | env steps at stop per seed "
        "| median env steps | stopped by the rule | eval returns |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, runs in results.items():
        walls = " / ".join(f"{r.wall_s:.1f}" for r in runs)
        steps = " / ".join(f"{r.env_steps:,}" for r in runs)
        evals = " / ".join(f"{r.eval_return:.0f}" for r in runs)
        stopped = f"{sum(r.stopped_by_rule for r in runs)}/{len(runs)}"
        median_wall = statistics.median(r.wall_s for r in runs)
        median_steps = statistics.median(r.env_steps for r in runs)
        print(
            f"| {name} | {seeds} | {walls} | {median_wall:.1f} | {steps} | {median_steps:,.0f} "
            f"| {stopped} | {evals} |"
        )
    if SB3_ROW not in results:
        return
    print()
    for name in (DISTRL_SAME_RULE_ROW, DISTRL_SHIPPED_ROW):
        wall = median_ratio(results[SB3_ROW], results[name], lambda r: r.wall_s)
        steps = median_ratio(results[SB3_ROW], results[name], lambda r: r.env_steps)
        print(f"SB3 / {name}, medians: wall **{wall:.2f}x**, env steps at the stop {steps:.2f}x")


def median_ratio(
    numerator: list[SolveRun], denominator: list[SolveRun], key: Callable[[SolveRun], float]
) -> float:
    return statistics.median(map(key, numerator)) / statistics.median(map(key, denominator))


# --------------------------------------------------------------------------------------- CleanRL
def first_step_reaching(episodes: list[tuple[int, float]], window: int, target: float) -> int | None:
    """Global step of the first episode after which the mean of the last ``window`` episodes (or
    of all so far, while fewer: distrl's rule) reaches ``target``."""
    recent: deque[float] = deque(maxlen=window)
    for step, episode_return in episodes:
        recent.append(episode_return)
        if sum(recent) / len(recent) >= target:
            return step
    return None


def cleanrl_run(python: Path, seed: int, work_dir: Path) -> LoopRun:
    work_dir.mkdir(parents=True, exist_ok=True)  # ppo.py writes its TensorBoard runs/ here
    cmd = [str(python), "-m", "cleanrl.ppo", "--seed", str(seed), "--cuda", "False"]
    wall_s, stdout = run_timed([*cmd, "--total-timesteps", str(CLEANRL_STEPS)], cwd=work_dir)
    episodes = [(int(step), float(ret)) for step, ret in CLEANRL_EPISODE.findall(stdout)]
    solved = first_step_reaching(episodes, CLEANRL_RETURN_WINDOW, CLEANRL_SOLVED_RETURN)
    return LoopRun(wall_s, float(CLEANRL_SPS.findall(stdout)[-1]), solved)


def distrl_at_cleanrl_settings(run_dir: Path, seed: int) -> LoopRun:
    args = ["--seed", str(seed), "--total-steps", str(CLEANRL_STEPS), *CLEANRL_HYPERPARAMETERS]
    wall_s = timed(distrl_cmd(1, run_dir, *args))
    rows = metrics_rows(run_dir)
    solved = next(
        (
            row["global_step"]
            for row in rows
            if (row.get("episode_return_mean") or -math.inf) >= CLEANRL_SOLVED_RETURN
        ),
        None,
    )
    return LoopRun(wall_s, rows[-1]["sps"], solved)


def cleanrl_comparison(seeds: list[int], tmp: Path) -> tuple[dict[str, list[LoopRun]], str | None]:
    """CleanRL and distrl once per seed, interleaved; distrl alone (and why) if CleanRL fails."""
    distrl_row = "distrl 1 rank, CleanRL's hyperparameters"
    cleanrl_row = f"CleanRL {CLEANRL_RELEASE.split('==')[1]} `ppo.py` defaults (its own venv, gym 0.23.1)"
    results: dict[str, list[LoopRun]] = {cleanrl_row: [], distrl_row: []}
    failure = None
    try:
        cleanrl = ensure_cleanrl()
    except subprocess.CalledProcessError as exc:
        failure = f"installing CleanRL failed: {' '.join(map(str, exc.cmd))} exited {exc.returncode}"
    for seed in seeds:
        if failure is None:
            try:
                results[cleanrl_row].append(cleanrl_run(cleanrl, seed, tmp / f"cleanrl-{seed}"))
            except CommandFailed as exc:
                failure = f"CleanRL's ppo.py did not run: {exc}"
        results[distrl_row].append(distrl_at_cleanrl_settings(tmp / f"distrl-cleanrl-{seed}", seed))
    if failure is not None:
        del results[cleanrl_row]
    return results, failure


def print_cleanrl(results: dict[str, list[LoopRun]], seeds: list[int], failure: str | None) -> None:
    print(f"\n## CleanRL's PPO and distrl at the same hyperparameters, {CLEANRL_STEPS:,} env steps")
    print(
        "\n4 envs x 128 steps, 4 minibatches of 128, 4 epochs, lr 2.5e-4 annealed, gamma 0.99, "
        "lambda 0.95, clip 0.2 (value loss clipped too), entropy 0.01, value 0.5, max grad norm "
        f"0.5, Adam eps 1e-5, 64x64 tanh actor and critic. Solved at: the env step at which the "
        f"mean return of the last {CLEANRL_RETURN_WINDOW} training episodes first reached "
        f"{CLEANRL_SOLVED_RETURN:g} (CleanRL: its printed episodes; distrl: "
        f"`episode_return_mean` with `train.return_window={CLEANRL_RETURN_WINDOW}`, logged once per "
        "512-step update). Env steps/s: each trainer's own figure for its whole loop (CleanRL's "
        "last `SPS`, distrl's `sps`). Wall: the whole process."
    )
    print(f"\n{CLEANRL_DIFFERENCES}")
    if failure is not None:
        print(f"\nCleanRL could not be run here: {failure}")
    print(
        "\n| trainer | seeds | wall s per seed | median wall s | env steps/s per seed | median env steps/s "
        f"| solved (running mean >= {CLEANRL_SOLVED_RETURN:g}) at env step, per seed | median |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, runs in results.items():
        walls = " / ".join(f"{r.wall_s:.1f}" for r in runs)
        rates = " / ".join(f"{r.steps_per_s:.0f}" for r in runs)
        solved = " / ".join("never" if r.solved_at_step is None else f"{r.solved_at_step:,}" for r in runs)
        steps = [r.solved_at_step if r.solved_at_step is not None else math.inf for r in runs]
        median_solved = statistics.median(steps)
        shown = "never" if math.isinf(median_solved) else f"{median_solved:,.0f}"
        median_wall = statistics.median(r.wall_s for r in runs)
        median_rate = statistics.median(r.steps_per_s for r in runs)
        print(
            f"| {name} | {seeds} | {walls} | {median_wall:.1f} | {rates} | {median_rate:.0f} "
            f"| {solved} | {shown} |"
        )
    print(CLEANRL_QUOTED_ROW)
    if len(results) == 2:
        cleanrl_runs, distrl_runs = results.values()
        rate = statistics.median(r.steps_per_s for r in distrl_runs) / statistics.median(
            r.steps_per_s for r in cleanrl_runs
        )
        print(f"\ndistrl / CleanRL, median env steps/s: **{rate:.2f}x**")


# ------------------------------------------------------------------------------------ throughput
def run_metrics(run_dir: Path) -> dict[str, float]:
    rows = metrics_rows(run_dir)
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


def print_throughput(tput: dict[str, dict[str, float]], rollout_steps: int, repeats: int) -> None:
    steps = f"{THROUGHPUT_STEPS} env steps per process, median of {repeats} interleaved runs"
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


PARTS = ("solve", "cleanrl", "throughput")


def run_parts(args: argparse.Namespace, tmp: Path) -> None:
    if "solve" in args.only:
        rule = stop_rule()
        print_time_to_solve(time_to_solve(args.seeds, tmp, not args.no_sb3, rule), args.seeds, rule)
    if "cleanrl" in args.only:
        results, failure = cleanrl_comparison(args.seeds, tmp)
        print_cleanrl(results, args.seeds, failure)
    if "throughput" in args.only:
        for rollout_steps in (16, 128):
            print_throughput(throughput(tmp, rollout_steps, args.repeats), rollout_steps, args.repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS), help="parts to run")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--no-sb3", action="store_true", help="time to solve: distrl rows only")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved throughput repeats")
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, {sys.platform}, python {sys.version.split()[0]}")
    with tempfile.TemporaryDirectory() as tmp_name:
        try:
            run_parts(args, Path(tmp_name))
        except CommandFailed as exc:
            sys.exit(str(exc))


if __name__ == "__main__":
    main()
