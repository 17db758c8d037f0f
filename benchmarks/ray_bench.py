"""Ray mode benchmark: distrl's env workers (1, 2, 4) against its plain path, and against RLlib's PPO.

Prints markdown tables for BENCHMARKS.md, measured on the same machine in the same run, every
contender once per repeat (or seed) in turn, medians reported (the machine is noisy):

  * ``throughput``: env steps per second of ``distrl train --launcher ray`` with 1 learner and
    ``workers.env`` = 0 (the learner steps its own envs), 1, 2 and 4 env workers (each
    ``workers.cpus_per_env`` CPUs, 0.25 by default so that 4 fit beside the learner on 2 cores;
    ``cluster.cpus_per_node`` = what the job asks for), and of the plain single-process
    ``distrl train`` (no Ray; what torchrun runs with 1 rank) with the same envs, on CartPole-v1
    (``configs/cartpole_ppo.yaml``, 32 envs) and HalfCheetah-v5 (``configs/halfcheetah_ppo.yaml``,
    4 envs), a fixed step budget each, no early stop. The rate is the steady state, from
    ``metrics.jsonl``: (global_step, time_s) after each update, the first fifth of the updates
    (at least one) left out as warm-up, env steps over seconds from there to the last update.
    With ``--appo-lag L``: APPO (``algo.name=appo``, the same hyperparameters) with its env
    workers ``collect.lag=L`` segments ahead of the learner, and beside it with as many collector
    processes (no Ray). The ratio to the plain path is Ray mode's overhead (or gain); start-up +
    shut-down is the whole process's wall time less the training loop's. Beside them, torchrun's
    2 ranks and Ray mode's 2 learners (1 CPU each, no env workers), the same envs split over two
    ranks either way: Ray mode's overhead on the multi-rank path.
  * ``rllib``: RLlib's PPO (``ray[rllib]==2.60.0``, new API stack, in its own venv
    ``benchmarks/.rllib-venv``) and distrl's Ray mode with the same env runners (``workers.env`` =
    ``num_env_runners``, 32 envs in all, ``num_envs_per_env_runner`` = 32 / runners, the same CPUs
    per runner; 0 runners: RLlib's local EnvRunner in the driver, distrl's learner stepping its
    envs) on CartPole-v1 with configs/cartpole_ppo.yaml's hyperparameters:
      (a) throughput at the fixed budget, measured as above (RLlib: lifetime env steps sampled and
          seconds since the algorithm was built, after every ``algo.train()``);
      (b) time to an evaluation return >= 475: every 2048 env steps (4 updates of 512) 10
          deterministic episodes on the seeds of distrl's stop check (``eval.seed`` + 1,000,000
          onwards), training stops once their mean reaches 475, or at the config's 200,000 env
          steps. distrl: ``train.stop_return=475 train.stop_confirm_episodes=0
          train.stop_check_every=4``. RLlib: a driver script (``RLLIB_DRIVER``) checks after every
          ``algo.train()`` whose lifetime env steps passed the next multiple of 2048, playing the
          episodes itself with gymnasium and the local EnvRunner's module (``algo.get_module()``,
          synced after every update) through ``forward_inference`` and the argmax of its logits,
          all 10 episodes batched per step as distrl's check does. Wall: the whole process (imports,
          Ray start, building the workers included); training loop: from the start of the first
          update to the end of the last (earlier checks included, the final one not).
    With ``--running-cluster`` every run of both joins a Ray head (token authentication on, the
    machine's CPUs) that was started from its own venv before the run and is stopped after it,
    as on a cluster brought up with ``ray start``: Ray's own start and stop are then in neither
    wall time.

Usage: python benchmarks/ray_bench.py [--only throughput rllib] [--repeats 3] [--seeds 1 2 3]
       [--env-workers 1 2 4] [--appo-lag 1 [--appo-env-workers 2]] [--no-two-learners]
       [--rllib-runners 2] [--cpus-per-env 0.25]
       [--running-cluster] [--ref CHECKOUT]
       [--cartpole-steps 100000] [--halfcheetah-steps 40960] [--solve-budget 200000]
RLlib is installed into benchmarks/.rllib-venv on first use (torch==2.13.0 first, the CPU wheel on
local disk, then ``ray[rllib]==2.60.0``, which pins its own gymnasium).

Equal in both PPOs: 32 envs x 16 steps = 512 samples per update (RLlib: train_batch_size_per_learner
512, rollout_fragment_length 16, one local Learner; see 6), minibatches of 256 reshuffled each
epoch, 4 epochs, lr 1e-3 annealed linearly to 0 over the run's budget of env steps, gamma 0.99, GAE lambda
0.95, clip 0.2, no entropy bonus, value loss coefficient 0.5, global gradient norm clipped at 0.5,
advantages normalised over the whole 512-sample batch, truncated episodes bootstrapped from the
value of their last observation, separate [64, 64] tanh actor and critic (``vf_share_layers=False``)
with orthogonal hidden weights (gain sqrt 2) and zero biases, no observation or reward
normalisation, no KL penalty (RLlib's default ``use_kl_loss=True`` turned off), one torch thread.

Where RLlib's run differs from distrl's (what RLlib's config cannot express):
  1. Value loss clipping: distrl (CleanRL-style) takes the larger of the squared errors of the new
     value and of the rollout's value moved at most 0.2 towards it; RLlib can only clamp the squared
     error itself at ``vf_clip_param`` (default 10, which would stop the critic learning from
     CartPole's errors above ~3.2): set to infinity, so RLlib's value loss is unclipped.
  2. Adam epsilon: distrl 1e-5; RLlib's TorchLearner builds ``torch.optim.Adam`` with torch's
     default 1e-8 (not a config option).
  3. Output layers: distrl's policy and value outputs are orthogonal with gain 0.01 and 1.0 and
     zero bias; RLlib's PPO heads take no initializer from the model config (torch's default
     Kaiming-uniform weights and biases). Only the hidden layers are initialised alike.
  4. Learning-rate schedule: distrl sets each update's rate from the env steps before its rollout,
     RLlib's scheduler from the lifetime env steps sampled including it (one update, 512 steps,
     later on the same line).
  5. Advantage normalisation: (A - mean) / (std + 1e-8) in distrl, / max(std, 1e-4) in RLlib.
  6. Samples per update: RLlib's EnvRunner samples until it has at least 16 x its envs transitions
     and finishes the vector step it is in, and gymnasium's next-step autoreset spends a vector
     step on every finished episode without a transition: ~520-535 transitions per update instead
     of exactly 512 (all in the batch and in its lifetime count, which the throughput, the lr
     schedule and the checks use). Its batch also holds one masked bootstrap row per episode
     chunk (~570 rows), over which it cycles minibatches of exactly 256 across epoch boundaries
     until 4 epochs are covered: 9 optimiser steps per update (measured: 2,304 module steps
     trained per update) where distrl makes 8 (2 per epoch). RLlib's check runs after the first
     update whose lifetime count passed the next multiple of 2048 (mostly every 4th update, now
     and then every 3rd as the surplus adds up); distrl's after every 4th.
  7. Where things run: RLlib's Learner is in the driver process (``num_learners=0``), distrl's
     learner is a Ray actor with 1 CPU; env runners / env workers get the same CPUs each. distrl
     writes metrics.jsonl every update and a checkpoint every 50,000 env steps (in a background
     thread); RLlib writes neither. Different RNG streams and env vectorisation (RLlib: gymnasium's
     SyncVectorEnv per runner).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from cartpole_bench import CONFIG as CARTPOLE
from cartpole_bench import (
    REPO,
    CommandFailed,
    distrl_cmd,
    ensure_venv,
    env_without_launcher,
    metrics_rows,
    run_timed,
)

from distrl.config.run import RunConfig, load_config
from distrl.runners.loop import STOP_CHECK_SEED_OFFSET

HALFCHEETAH = REPO / "configs" / "halfcheetah_ppo.yaml"
RLLIB_VENV = REPO / "benchmarks" / ".rllib-venv"
RLLIB_RELEASE = "ray[rllib]==2.60.0"
WARMUP_FRACTION = 0.2
"""Leading share of a run's updates left out of its steady-state rate (at least one update)."""
SOLVE_TARGET = 475.0
SOLVE_CHECK_ENV_STEPS = 2048
PLAIN = "plain `distrl train` (1 process, no Ray)"
TORCHRUN_2 = "torchrun, 2 ranks (each stepping half the envs)"
RAY_2 = "Ray mode, `workers.policy=2` (2 learners, each stepping half the envs)"
DIFFERENCES_HEADING = "Equal in both PPOs"

RLLIB_DRIVER = r"""
import json, math, os, sys, time

os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
start = time.perf_counter()
spec = json.loads(sys.argv[1])

import numpy as np
import gymnasium as gym
import ray
import ray.tune.trainable.trainable as trainable
import torch
from ray.rllib.algorithms.ppo import PPOConfig
from ray.rllib.core.columns import Columns
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME

torch.set_num_threads(1)
# The Algorithm (a Tune Trainable) makes a log dir in ~/ray_results otherwise.
trainable.DEFAULT_STORAGE_PATH = spec["work_dir"]
if spec["address"]:  # a running cluster, started from RLlib's venv
    ray.init(address=spec["address"], log_to_driver=False)
else:
    ray.init(
        num_cpus=spec["num_cpus"], include_dashboard=False, _temp_dir=spec["ray_temp_dir"],
        log_to_driver=False,
    )
budget = spec["budget"]
lr = [[0, spec["lr"]], [budget, 0.0]] if spec["anneal_lr"] else spec["lr"]
config = (
    PPOConfig()
    .environment(spec["env_id"])
    .env_runners(
        num_env_runners=spec["num_env_runners"],
        num_envs_per_env_runner=spec["num_envs_per_env_runner"],
        num_cpus_per_env_runner=spec["cpus_per_env_runner"],
        rollout_fragment_length=spec["rollout_fragment_length"],
    )
    .learners(num_learners=0)
    .training(
        train_batch_size_per_learner=spec["train_batch_size"],
        minibatch_size=spec["minibatch_size"],
        num_epochs=spec["num_epochs"],
        lr=lr,
        gamma=spec["gamma"],
        lambda_=spec["lambda"],
        clip_param=spec["clip"],
        vf_clip_param=float("inf"),
        vf_loss_coeff=spec["vf_loss_coeff"],
        entropy_coeff=spec["entropy_coeff"],
        use_kl_loss=False,
        kl_coeff=0.0,
        grad_clip=spec["grad_clip"],
        grad_clip_by="global_norm",
    )
    .rl_module(
        model_config=DefaultModelConfig(
            fcnet_hiddens=spec["hidden"],
            fcnet_activation=spec["activation"],
            fcnet_kernel_initializer="orthogonal_",
            fcnet_kernel_initializer_kwargs={"gain": math.sqrt(2)},
            fcnet_bias_initializer="zeros_",
            vf_share_layers=False,
        )
    )
    .debugging(seed=spec["seed"])
)
algo = config.build_algo()


def evaluate():
    # Greedy actions of the local EnvRunner's module (synced after every update), the episodes
    # stepped side by side, episode i seeded first_seed + i.
    module = algo.get_module()
    envs = [gym.make(spec["env_id"]) for _ in range(spec["episodes"])]
    obs = np.stack([env.reset(seed=spec["first_seed"] + i)[0] for i, env in enumerate(envs)])
    totals = np.zeros(len(envs))
    running = np.ones(len(envs), dtype=bool)
    while running.any():
        with torch.no_grad():
            out = module.forward_inference({Columns.OBS: torch.as_tensor(obs, dtype=torch.float32)})
        actions = out[Columns.ACTION_DIST_INPUTS].argmax(-1).numpy()
        for i, env in enumerate(envs):
            if running[i]:
                obs[i], reward, terminated, truncated, _ = env.step(int(actions[i]))
                totals[i] += reward
                running[i] = not (terminated or truncated)
    for env in envs:
        env.close()
    return float(totals.mean())


loop_start = time.perf_counter()
points, checks, steps, stopped = [], [], 0, False
next_check = spec["check_every"]
while steps < budget:
    result = algo.train()
    steps = int(result[ENV_RUNNER_RESULTS][NUM_ENV_STEPS_SAMPLED_LIFETIME])
    points.append([steps, time.perf_counter() - loop_start])
    if spec["solve"] and steps >= next_check:
        while next_check <= steps:
            next_check += spec["check_every"]
        checks.append([steps, evaluate()])
        if checks[-1][1] >= spec["target"]:
            stopped = True
            break
loop_s = time.perf_counter() - loop_start
algo.stop()
ray.shutdown()
print(json.dumps({
    "points": points, "checks": checks, "env_steps": steps, "stopped_by_rule": stopped,
    "loop_s": loop_s, "build_s": loop_start - start,
}))
"""


@dataclass(frozen=True)
class Rate:
    steady_sps: float
    """Env steps per second after the warm-up updates (see ``steady_sps``)."""
    loop_s: float
    """The training loop's seconds, first update to last."""
    wall_s: float
    """The whole process."""


@dataclass(frozen=True)
class SolveRun:
    wall_s: float
    loop_s: float
    env_steps: int
    last_check: float | None
    """Mean return of the last deterministic check (None: no check ran)."""
    stopped_by_rule: bool


def steady_sps(points: list[tuple[int, float]]) -> float:
    """Env steps per second over a run's updates less the first fifth (at least the first):
    ``points`` are (env steps so far, seconds since the loop started) after each update."""
    skip = max(1, int(len(points) * WARMUP_FRACTION))
    if len(points) <= skip:
        raise ValueError(f"{len(points)} updates: too few for a steady-state rate; raise the budget")
    (step0, time0), (step1, time1) = points[skip - 1], points[-1]
    return (step1 - step0) / (time1 - time0)


def ensure_rllib() -> Path:
    return ensure_venv(RLLIB_VENV, [RLLIB_RELEASE])


# ------------------------------------------------------------------------------------ distrl runs
def ray_args(
    env_workers: int, cpus_per_env: float, tmp: Path, learners: int = 1, address: str | None = None
) -> list[str]:
    """``--launcher ray`` with ``learners`` learners (1 CPU each) and ``env_workers`` env workers;
    a local Ray instance per run, its sessions under ``tmp`` (removed with it), or the running
    cluster at ``address``."""
    cluster = [f"cluster.ray_temp_dir={tmp / 'ray'}"] if address is None else ["--ray-address", address]
    return [
        "--launcher", "ray",
        f"workers.policy={learners}", "workers.cpus_per_policy=1",
        f"workers.env={env_workers}", f"workers.cpus_per_env={cpus_per_env:g}",
        "cluster.num_nodes=1", f"cluster.cpus_per_node={learners + env_workers * cpus_per_env:g}",
        *cluster,
    ]  # fmt: skip


@dataclass(frozen=True)
class Contender:
    args: list[str]
    """``distrl train``'s arguments beyond the config, run dir and budget."""
    torchrun_ranks: int = 1
    """Above 1: started by torchrun with that many ranks, else as one process."""


def run_distrl(config: Path, run_dir: Path, args: list[str], torchrun_ranks: int = 1) -> float:
    """Wall seconds of one distrl training (one process, torchrun's ranks or ``--launcher ray``)."""
    return run_timed(distrl_cmd(torchrun_ranks, run_dir, *args, config=config))[0]


def distrl_rate(config: Path, run_dir: Path, steps: int, contender: Contender) -> Rate:
    args = ["--total-steps", str(steps), "train.stop_return=null", "train.device=cpu", *contender.args]
    wall_s = run_distrl(config, run_dir, args, contender.torchrun_ranks)
    rows = metrics_rows(run_dir)
    points = [(row["global_step"], row["time_s"]) for row in rows]
    return Rate(steady_sps(points), rows[-1]["time_s"], wall_s)


def stop_check_every(cfg: RunConfig) -> int:
    """Updates per SOLVE_CHECK_ENV_STEPS env steps."""
    per_update = cfg.env.num_envs * cfg.algo.rollout_steps
    if SOLVE_CHECK_ENV_STEPS % per_update:
        raise ValueError(f"a check every {SOLVE_CHECK_ENV_STEPS} env steps is no whole number of updates")
    return SOLVE_CHECK_ENV_STEPS // per_update


def distrl_solve(run_dir: Path, seed: int, budget: int, extra: list[str]) -> SolveRun:
    cfg = load_config(CARTPOLE)
    rule = [
        f"train.stop_return={SOLVE_TARGET:g}",
        "train.stop_confirm_episodes=0",
        f"train.stop_check_every={stop_check_every(cfg)}",
    ]
    args = ["--seed", str(seed), "--total-steps", str(budget), "train.device=cpu", *rule, *extra]
    wall_s = run_distrl(CARTPOLE, run_dir, args)
    rows = metrics_rows(run_dir)
    checks = [row["stop_check_return"] for row in rows if "stop_check_return" in row]
    last = checks[-1] if checks else None
    stopped = last is not None and last >= SOLVE_TARGET
    return SolveRun(wall_s, rows[-1]["time_s"], rows[-1]["global_step"], last, stopped)


# ------------------------------------------------------------------------------------- RLlib runs
def rllib_spec(
    runners: int, cpus_per_env: float, seed: int, budget: int, solve: bool, tmp: Path, address: str | None
) -> dict:
    """The driver's settings, taken from configs/cartpole_ppo.yaml; ``address``: a running Ray
    cluster to join (None: start one)."""
    cfg = load_config(CARTPOLE)
    envs, algo = cfg.env.num_envs, cfg.algo
    if envs is None or algo.minibatch_size is None:
        raise ValueError(f"{CARTPOLE} must set env.num_envs and algo.minibatch_size")
    if runners and envs % runners:
        raise ValueError(f"{envs} envs do not split evenly over {runners} RLlib env runners")
    work_dir = tmp / "rllib-logs"
    work_dir.mkdir(parents=True, exist_ok=True)
    return {
        "env_id": cfg.env.id,
        "seed": seed,
        "num_cpus": os.cpu_count(),
        "address": address,
        "ray_temp_dir": str(tmp / "rllib-ray"),
        "work_dir": str(work_dir),
        "num_env_runners": runners,
        "num_envs_per_env_runner": envs // max(runners, 1),
        "cpus_per_env_runner": cpus_per_env,
        "rollout_fragment_length": algo.rollout_steps,
        "train_batch_size": envs * algo.rollout_steps,
        "minibatch_size": algo.minibatch_size,
        "num_epochs": algo.update_epochs,
        "lr": algo.learning_rate,
        "anneal_lr": algo.anneal_lr,
        "gamma": algo.gamma,
        "lambda": algo.gae_lambda,
        "clip": algo.clip_coef,
        "vf_loss_coeff": algo.value_coef,
        "entropy_coeff": algo.entropy_coef,
        "grad_clip": algo.max_grad_norm,
        "hidden": list(cfg.model.hidden_sizes),
        "activation": cfg.model.activation,
        "budget": budget,
        "solve": solve,
        "target": SOLVE_TARGET,
        "check_every": SOLVE_CHECK_ENV_STEPS,
        "episodes": cfg.eval.episodes,
        "first_seed": cfg.eval.seed + STOP_CHECK_SEED_OFFSET,
    }


def run_rllib(python: Path, spec: dict, tmp: Path) -> tuple[float, dict]:
    """Whole-process wall seconds and the driver's JSON line."""
    script = tmp / "rllib_driver.py"
    script.write_text(RLLIB_DRIVER)
    wall_s, stdout = run_timed([str(python), str(script), json.dumps(spec)], cwd=tmp)
    line = next(line for line in reversed(stdout.splitlines()) if line.startswith("{"))
    return wall_s, json.loads(line)


def rllib_rate(
    python: Path, runners: int, cpus_per_env: float, steps: int, tmp: Path, address: str | None
) -> Rate:
    wall_s, out = run_rllib(python, rllib_spec(runners, cpus_per_env, 1, steps, False, tmp, address), tmp)
    points = [(step, seconds) for step, seconds in out["points"]]
    return Rate(steady_sps(points), points[-1][1], wall_s)


def rllib_solve(
    python: Path, runners: int, cpus_per_env: float, seed: int, budget: int, tmp: Path, address: str | None
) -> SolveRun:
    spec = rllib_spec(runners, cpus_per_env, seed, budget, True, tmp, address)
    wall_s, out = run_rllib(python, spec, tmp)
    last = out["checks"][-1][1] if out["checks"] else None
    # Up to the end of the last update, as distrl's last time_s (the final check not included).
    loop_s = out["points"][-1][1]
    return SolveRun(wall_s, loop_s, out["env_steps"], last, out["stopped_by_rule"])


# ------------------------------------------------------------------------------------- throughput
def throughput_contenders(cfg: RunConfig, args: argparse.Namespace, tmp: Path) -> dict[str, Contender]:
    contenders = {
        PLAIN: Contender([]),
        "Ray mode, `workers.env=0` (the learner steps its envs)": Contender(
            ray_args(0, args.cpus_per_env, tmp)
        ),
    }
    for n in args.env_workers:
        if cfg.env.num_envs is not None and n > cfg.env.num_envs:
            continue  # more workers than envs: some would have none
        each = f"{cfg.env.num_envs / n:g} env{'s' * (cfg.env.num_envs != n)}" if cfg.env.num_envs else "?"
        contenders[f"Ray mode, `workers.env={n}` ({each} each)"] = Contender(
            ray_args(n, args.cpus_per_env, tmp)
        )
    for n in args.appo_env_workers if args.appo_lag else ():
        # APPO: the env workers collect the next segments while the learner updates on this one.
        appo = ["algo.name=appo", f"collect.lag={args.appo_lag}"]
        contenders[f"Ray mode APPO, `workers.env={n}`, `collect.lag={args.appo_lag}`"] = Contender(
            [*appo, *ray_args(n, args.cpus_per_env, tmp)]
        )
        contenders[f"APPO, `collect.processes={n}`, `collect.lag={args.appo_lag}` (no Ray)"] = Contender(
            [*appo, f"collect.processes={n}"]
        )
    if args.two_learners:
        contenders[TORCHRUN_2] = Contender([], torchrun_ranks=2)
        contenders[RAY_2] = Contender(ray_args(0, args.cpus_per_env, tmp, learners=2))
    return contenders


def throughput(args: argparse.Namespace, tmp: Path) -> dict[str, dict[str, list[Rate]]]:
    """Env -> contender -> one Rate per repeat; every contender of every env once per repeat."""
    budgets = {CARTPOLE: args.cartpole_steps, HALFCHEETAH: args.halfcheetah_steps}
    results: dict[str, dict[str, list[Rate]]] = {}
    for _ in range(args.repeats):
        for config, steps in budgets.items():
            if not steps:
                continue
            cfg = load_config(config)
            label = f"{cfg.env.id}, {cfg.env.num_envs} envs, {steps:,} env steps"
            for index, (name, contender) in enumerate(throughput_contenders(cfg, args, tmp).items()):
                run_dir = tmp / f"tput-{config.stem}-{index}"
                results.setdefault(label, {}).setdefault(name, []).append(
                    distrl_rate(config, run_dir, steps, contender)
                )
    return results


def median_of(runs: list[Rate], key: Callable[[Rate], float]) -> float:
    return statistics.median(map(key, runs))


def print_throughput(results: dict[str, dict[str, list[Rate]]], args: argparse.Namespace) -> None:
    print(f"\n## Ray mode throughput, median of {args.repeats} interleaved runs")
    print(
        "\nEnv steps/s: the steady state from `metrics.jsonl` (the first fifth of the updates left "
        "out). `/ plain`: against the plain single-process path with the same envs. Start-up + "
        "shut-down: the whole process's wall time less its training loop's (Ray's start, the "
        f"placement group and the actors). Env workers get `workers.cpus_per_env={args.cpus_per_env:g}` "
        f"CPUs each, the learner 1; {os.cpu_count()} cores."
    )
    for label, contenders in results.items():
        print(f"\n### {label}\n")
        print(
            "| contender | env steps/s per repeat | median env steps/s | / plain | median wall s "
            "| median start-up + shut-down s |"
        )
        print("| --- | --- | --- | --- | --- | --- |")
        plain = median_of(contenders[PLAIN], lambda r: r.steady_sps)
        for name, runs in contenders.items():
            rates, rate, wall, startup = rate_cells(runs)
            print(f"| {name} | {rates} | {rate:,.0f} | {rate / plain:.2f}x | {wall:.1f} | {startup:.1f} |")
        if TORCHRUN_2 in contenders and RAY_2 in contenders:
            torchrun = median_of(contenders[TORCHRUN_2], lambda r: r.steady_sps)
            ray = median_of(contenders[RAY_2], lambda r: r.steady_sps)
            ratio = ray / torchrun
            print(f"\n- Ray mode's 2 learners / torchrun's 2 ranks, median env steps/s: **{ratio:.2f}x**")


def rate_cells(runs: list[Rate]) -> tuple[str, float, float, float]:
    """A throughput row's cells: the rate per repeat, and the medians of rate, wall time and
    start-up + shut-down."""
    rates = " / ".join(f"{r.steady_sps:,.0f}" for r in runs)
    rate, wall = median_of(runs, lambda r: r.steady_sps), median_of(runs, lambda r: r.wall_s)
    return rates, rate, wall, median_of(runs, lambda r: r.wall_s - r.loop_s)


# ------------------------------------------------------------------------------------------ RLlib
@dataclass
class RllibResults:
    rates: dict[str, list[Rate]]
    solves: dict[str, list[SolveRun]]
    pairs: list[tuple[str, str]]
    """(distrl row, RLlib row) per number of env runners."""
    failure: str | None
    ref_pairs: list[tuple[str, str]] = field(default_factory=list)
    """(distrl row, the same at ``--ref``) per number of env runners."""


def rllib_comparison(args: argparse.Namespace, tmp: Path) -> RllibResults:
    """distrl's Ray mode and RLlib with the same env runners: throughput once per repeat, time to
    solve once per seed, interleaved; distrl alone (and why) if RLlib cannot be installed or run."""
    cfg = load_config(CARTPOLE)
    envs = cfg.env.num_envs
    rows = {
        n: (
            f"distrl Ray mode, `workers.env={n}`",
            f"RLlib PPO, `num_env_runners={n}`, {envs // max(n, 1)} envs each",
        )
        for n in args.rllib_runners
    }
    refs = {n: f"distrl Ray mode at {args.ref}, `workers.env={n}`" for n in args.rllib_runners if args.ref}
    results = RllibResults({}, {}, list(rows.values()), None, [(rows[n][0], refs[n]) for n in refs])
    python = None
    try:
        python = ensure_rllib()
    except subprocess.CalledProcessError as exc:
        results.failure = f"installing RLlib failed: {' '.join(map(str, exc.cmd))} exited {exc.returncode}"

    def rllib(run: Callable[[Path], object], into: list) -> None:
        if python is None or results.failure is not None:
            return
        try:
            into.append(run(python))
        except (CommandFailed, StopIteration, KeyError, ValueError) as exc:
            results.failure = f"RLlib's driver did not run: {exc!r}"

    for _ in range(args.repeats):
        for n, (distrl_row, rllib_row) in rows.items():
            for row, source in ((distrl_row, None), (refs.get(n), args.ref)):
                if row is None:
                    continue
                with cluster_for(sys.executable, args, tmp) as address, distrl_from(source):
                    contender = Contender(ray_args(n, args.cpus_per_env, tmp, address=address))
                    rate = distrl_rate(CARTPOLE, tmp / f"rllib-vs-{n}", args.cartpole_steps, contender)
                results.rates.setdefault(row, []).append(rate)
            with cluster_for(python, args, tmp) as address:
                rllib(
                    lambda py, n=n, a=address: rllib_rate(
                        py, n, args.cpus_per_env, args.cartpole_steps, tmp, a
                    ),
                    results.rates.setdefault(rllib_row, []),
                )
    for seed in args.seeds:
        for n, (distrl_row, rllib_row) in rows.items():
            for row, source in ((distrl_row, None), (refs.get(n), args.ref)):
                if row is None:
                    continue
                with cluster_for(sys.executable, args, tmp) as address, distrl_from(source):
                    extra = ray_args(n, args.cpus_per_env, tmp, address=address)
                    solve = distrl_solve(tmp / f"solve-{n}-{seed}", seed, args.solve_budget, extra)
                results.solves.setdefault(row, []).append(solve)
            with cluster_for(python, args, tmp) as address:
                rllib(
                    lambda py, n=n, seed=seed, a=address: rllib_solve(
                        py, n, args.cpus_per_env, seed, args.solve_budget, tmp, a
                    ),
                    results.solves.setdefault(rllib_row, []),
                )
    return results


@contextlib.contextmanager
def distrl_from(checkout: Path | None) -> Iterator[None]:
    """The distrl runs started meanwhile import distrl from ``checkout``'s ``src`` (before the
    installed one; Ray mode's workers too, which get the driver's PYTHONPATH); None: as installed."""
    if checkout is None:
        yield
        return
    saved = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(checkout.resolve() / "src"), saved]))
    try:
        yield
    finally:
        os.environ.pop("PYTHONPATH") if saved is None else os.environ.__setitem__("PYTHONPATH", saved)


@contextlib.contextmanager
def cluster_for(python: Path | str | None, args: argparse.Namespace, tmp: Path) -> Iterator[str | None]:
    """With ``--running-cluster``: a Ray head started from ``python``'s venv (the workers run that
    venv's Python) before a run and stopped after it, neither timed, its address; otherwise None
    (the run starts its own Ray)."""
    if not args.running_cluster or python is None:
        yield None
        return
    token = tmp / "head-token"  # token authentication, as distrl's own local Ray has
    if not token.exists():
        token.write_text(secrets.token_hex(32))
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token))  # the runs inherit it
    ray_bin = str(Path(python).with_name("ray"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    head = subprocess.Popen(
        [ray_bin, "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
         f"--num-cpus={os.cpu_count()}", "--num-gpus=0", "--include-dashboard=false",
         f"--temp-dir={tmp / 'head'}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env_without_launcher(),
    )  # fmt: skip
    address = f"127.0.0.1:{port}"
    try:
        probe = [str(python), "-c", "import ray, sys; ray.init(address=sys.argv[1]); ray.shutdown()", address]
        deadline = time.monotonic() + 120
        while subprocess.run(probe, check=False, capture_output=True).returncode:
            if time.monotonic() > deadline or head.poll() is not None:
                raise CommandFailed(f"the Ray head from {python} did not come up")
            time.sleep(1)
        yield address
    finally:
        head.terminate()
        head.wait(timeout=120)


def print_rllib(results: RllibResults, args: argparse.Namespace) -> None:
    print("\n## RLlib's PPO and distrl's Ray mode, CartPole-v1, configs/cartpole_ppo.yaml's hyperparameters")
    print(f"\n{__doc__[__doc__.index(DIFFERENCES_HEADING) :].strip()}")
    if results.failure is not None:
        print(f"\nRLlib could not be run here: {results.failure}")
    print(f"\n### Throughput, {args.cartpole_steps:,} env steps, median of {args.repeats} interleaved runs\n")
    print(
        "| trainer | env steps/s per repeat | median env steps/s | median wall s "
        "| median start-up + shut-down s |"
    )
    print("| --- | --- | --- | --- | --- |")
    for name, runs in results.rates.items():
        if not runs:
            continue
        rates, rate, wall, startup = rate_cells(runs)
        print(f"| {name} | {rates} | {rate:,.0f} | {wall:.1f} | {startup:.1f} |")
    print(
        f"\n### Time to a deterministic evaluation return >= {SOLVE_TARGET:g} (checked every "
        f"{SOLVE_CHECK_ENV_STEPS} env steps, 10 episodes; budget {args.solve_budget:,} env steps)\n"
    )
    print(
        "| trainer | seeds | wall s per seed | median wall s | median training loop s "
        "| env steps at stop per seed | median env steps | stopped by the rule | last check per seed |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, solves in results.solves.items():
        if not solves:
            continue
        walls = " / ".join(f"{s.wall_s:.1f}" for s in solves)
        steps = " / ".join(f"{s.env_steps:,}" for s in solves)
        checks = " / ".join("-" if s.last_check is None else f"{s.last_check:.0f}" for s in solves)
        stopped = f"{sum(s.stopped_by_rule for s in solves)}/{len(solves)}"
        wall = statistics.median(s.wall_s for s in solves)
        loop = statistics.median(s.loop_s for s in solves)
        median_steps = statistics.median(s.env_steps for s in solves)
        print(
            f"| {name} | {args.seeds} | {walls} | {wall:.1f} | {loop:.1f} | {steps} | {median_steps:,.0f} "
            f"| {stopped} | {checks} |"
        )
    print()
    for distrl_row, ref_row in results.ref_pairs:
        solve_d, solve_r = results.solves.get(distrl_row), results.solves.get(ref_row)
        if solve_d and solve_r:
            wall = statistics.median(s.wall_s for s in solve_r) / statistics.median(s.wall_s for s in solve_d)
            print(f"- {ref_row} / this checkout, median wall to solve: **{wall:.2f}x**")
        rate_d, rate_r = results.rates.get(distrl_row), results.rates.get(ref_row)
        if rate_d and rate_r:
            ratio = median_of(rate_d, lambda r: r.steady_sps) / median_of(rate_r, lambda r: r.steady_sps)
            print(f"- this checkout / {ref_row}, median env steps/s: **{ratio:.2f}x**")
    for distrl_row, rllib_row in results.pairs:
        rate_d, rate_r = results.rates.get(distrl_row), results.rates.get(rllib_row)
        if rate_d and rate_r:
            ratio = median_of(rate_r, lambda r: r.steady_sps) / median_of(rate_d, lambda r: r.steady_sps)
            print(f"- RLlib / distrl ({rllib_row}), median env steps/s: **{ratio:.2f}x**")
        solve_d, solve_r = results.solves.get(distrl_row), results.solves.get(rllib_row)
        if solve_d and solve_r:
            wall = statistics.median(s.wall_s for s in solve_r) / statistics.median(s.wall_s for s in solve_d)
            steps = statistics.median(s.env_steps for s in solve_r) / statistics.median(
                s.env_steps for s in solve_d
            )
            print(
                f"- RLlib / distrl ({rllib_row}), medians: wall to solve **{wall:.2f}x**, "
                f"env steps {steps:.2f}x"
            )


PARTS = ("throughput", "rllib")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS), help="parts to run")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved throughput repeats")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3], help="time-to-solve seeds")
    parser.add_argument(
        "--env-workers", type=int, nargs="+", default=[1, 2, 4], help="throughput: workers.env"
    )
    parser.add_argument(
        "--appo-lag", type=int, default=0, help="throughput: also APPO at this collect.lag (0: none)"
    )
    parser.add_argument(
        "--appo-env-workers", type=int, nargs="+", default=[2], help="throughput: APPO's workers.env"
    )
    parser.add_argument(
        "--rllib-runners", type=int, nargs="+", default=[2], help="rllib: num_env_runners = workers.env"
    )
    parser.add_argument("--cpus-per-env", type=float, default=0.25, help="workers.cpus_per_env, RLlib's too")
    parser.add_argument(
        "--running-cluster",
        action="store_true",
        help="rllib: every run joins a Ray head started before it from its own venv (not timed)",
    )
    parser.add_argument(
        "--no-two-learners",
        dest="two_learners",
        action="store_false",
        help="throughput: leave out torchrun's 2 ranks against Ray mode's 2 learners",
    )
    parser.add_argument(
        "--ref",
        type=Path,
        help="rllib: also run distrl from this checkout's src (e.g. a `git worktree` of an older commit)",
    )
    parser.add_argument("--cartpole-steps", type=int, default=100_000, help="CartPole throughput budget")
    parser.add_argument(
        "--halfcheetah-steps", type=int, default=40_960, help="HalfCheetah throughput budget (0: skip)"
    )
    parser.add_argument(
        "--solve-budget",
        type=int,
        default=load_config(CARTPOLE).train.total_steps,
        help="env steps at most when no check passes (the lr anneals over it)",
    )
    args = parser.parse_args()
    print(f"machine: {os.cpu_count()} cores, {sys.platform}, python {sys.version.split()[0]}")
    # Short path: Ray's socket paths must stay under ~107 characters.
    with tempfile.TemporaryDirectory(prefix="raybench-") as tmp_name:
        tmp = Path(tmp_name)
        try:
            if "throughput" in args.only:
                print_throughput(throughput(args, tmp), args)
            if "rllib" in args.only:
                print_rllib(rllib_comparison(args, tmp), args)
        except CommandFailed as exc:
            sys.exit(str(exc))


if __name__ == "__main__":
    main()
