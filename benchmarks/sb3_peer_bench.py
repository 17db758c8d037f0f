"""SAC and TD3 on Pendulum-v1 and A2C on CartPole-v1 against SB3's, stopped by the same rule.

For each algorithm, its shipped config (``configs/pendulum_sac.yaml``, ``pendulum_td3.yaml``,
``cartpole_a2c.yaml``) and SB3's same algorithm at the same settings (SB3's defaults, which the SAC
and TD3 configs copy, TD3 with the paper's exploration noise on both sides; rl-zoo's
A2C CartPole settings, which the A2C config copies) run once per seed, interleaved, one torch
thread each. Both stop on distrl's check: every ``train.stop_check_every`` updates (SB3:
``EvalCallback`` at the same env step) a deterministic evaluation of ``eval.episodes`` episodes on
fixed seeds, stop once its mean reaches ``train.stop_return``; distrl's confirmation episodes are
off (``train.stop_confirm_episodes=0``), as SB3's callback has none. Wall: the whole process, start
to saved policy. A2C also runs on 2 ranks (torchrun) with the shipped config.

Usage: python benchmarks/sb3_peer_bench.py [--only sac td3 a2c] [--seeds 1 2 3]
SB3 is installed into benchmarks/.sb3-venv on first use (``cartpole_bench.ensure_sb3``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from cartpole_bench import StopRule, distrl_eval, ensure_sb3, metrics_rows, run_timed, timed

from distrl.config.run import load_config
from distrl.runners.loop import STOP_CHECK_SEED_OFFSET

REPO = Path(__file__).resolve().parents[1]
PEERS = {
    "sac": (
        REPO / "configs" / "pendulum_sac.yaml",
        # SB3's defaults are the config's: 1 env, batch 256, learning_starts 100, lr 3e-4, tau 0.005,
        # [256, 256] ReLU networks, a learned temperature, one gradient step per env step.
        "SAC('MlpPolicy', env, seed=seed, verbose=0)",
        1_000_000,
    ),
    "td3": (
        REPO / "configs" / "pendulum_td3.yaml",
        # SB3's TD3 defaults are the config's: 1 env, batch 256, learning_starts 100, lr 1e-3, tau
        # 0.005, [400, 300] ReLU networks, policy_delay 2, target noise 0.2 clipped at 0.5; both add
        # the paper's exploration noise, N(0, 0.1) on actions scaled to [-1, 1] (SB3: action_noise).
        "TD3('MlpPolicy', env, action_noise=NormalActionNoise(np.zeros(1), np.full(1, 0.1)), seed=seed, "
        "verbose=0)",
        1_000_000,
    ),
    "a2c": (
        REPO / "configs" / "cartpole_a2c.yaml",
        # rl-zoo's hyperparams/a2c.yml CartPole-v1: 8 envs, ent_coef 0 (the rest SB3's defaults).
        "A2C('MlpPolicy', env, ent_coef=0.0, seed=seed, verbose=0)",
        500_000,
    ),
}
SB3_SCRIPT = """
import json, sys
import gymnasium as gym
import torch
import numpy as np
from stable_baselines3 import A2C, SAC, TD3
from stable_baselines3.common.noise import NormalActionNoise
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

torch.set_num_threads(1)
env_id, model_expr, out = sys.argv[1], sys.argv[2], sys.argv[4]
seed, num_envs, total = int(sys.argv[3]), int(sys.argv[5]), int(sys.argv[6])
target, check_every_calls = float(sys.argv[7]), int(sys.argv[8])
episodes, first_seed = int(sys.argv[9]), int(sys.argv[10])
env = make_vec_env(env_id, n_envs=num_envs, seed=seed)
check_envs = DummyVecEnv(
    [lambda s=first_seed + i: Monitor(FixedSeed(gym.make(env_id), s)) for i in range(episodes)]
)
check = EvalCallback(check_envs, callback_on_new_best=StopTrainingOnRewardThreshold(reward_threshold=target),
                     n_eval_episodes=episodes, eval_freq=check_every_calls, deterministic=True, verbose=0,
                     log_path=out + "-checks")
model = eval(model_expr)
model.learn(total_timesteps=total, callback=check)
model.save(out)
stopped = bool(check.best_mean_reward >= target)
returns = [float(sum(r) / len(r)) for r in check.evaluations_results]
print(json.dumps({"env_steps": model.num_timesteps, "stopped_by_rule": stopped, "check_returns": returns}))
"""


def stop_rule(config: Path) -> tuple[StopRule, int]:
    """The config's stop check in env steps, and its global envs."""
    cfg = load_config(config)
    assert cfg.train.stop_return is not None and cfg.env.num_envs is not None
    rule = StopRule(
        target=cfg.train.stop_return,
        every_env_steps=cfg.train.stop_check_every * cfg.env.num_envs * cfg.algo.rollout_steps,
        episodes=cfg.eval.episodes,
        first_seed=cfg.eval.seed + STOP_CHECK_SEED_OFFSET,
        confirm_episodes=0,
    )
    return rule, cfg.env.num_envs


def distrl_run(config: Path, ranks: int, run_dir: Path, seed: int) -> dict[str, float]:
    train = ["--config", str(config), "--run-dir", str(run_dir), "--overwrite", "log.tensorboard=false",
             "--seed", str(seed), "train.stop_confirm_episodes=0"]  # fmt: skip
    if ranks == 1:
        command = [sys.executable, "-m", "distrl.train", *train]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={ranks}",
                   "--master_addr=127.0.0.1", "--master_port=29534", "-m", "distrl.train", *train,
                   "--distributed"]  # fmt: skip
    wall_s = timed(command)
    last = metrics_rows(run_dir)[-1]
    check = last.get("stop_check_return")
    stopped = check is not None and check >= load_config(config).train.stop_return
    return {
        "wall_s": wall_s,
        "env_steps": last["global_step"],
        "stopped": stopped,
        "eval": distrl_eval(run_dir),
    }


def sb3_run(python: Path, algo: str, out: Path, seed: int) -> dict[str, float]:
    config, model_expr, total = PEERS[algo]
    rule, num_envs = stop_rule(config)
    info = sb3_learn(python, load_config(config).env.id, model_expr, num_envs, total, rule, out, seed)
    return {
        "wall_s": info["wall_s"],
        "env_steps": info["env_steps"],
        "stopped": info["stopped_by_rule"],
        "eval": float("nan"),
    }


def sb3_learn(
    python: Path,
    env_id: str,
    model_expr: str,
    num_envs: int,
    total: int,
    rule: StopRule,
    out: Path,
    seed: int,
) -> dict[str, Any]:
    """One SB3 run checked by ``rule``: wall seconds, env steps, whether the rule stopped it, and
    the mean return of every check."""
    args = [env_id, model_expr, seed, out, num_envs, total, rule.target, rule.every_env_steps // num_envs,
            rule.episodes, rule.first_seed]  # fmt: skip
    wall_s, stdout = run_timed([str(python), "-c", SB3_SCRIPT, *map(str, args)])
    return {"wall_s": wall_s, **json.loads(stdout.splitlines()[-1])}


def compare(algo: str, seeds: list[int], tmp: Path) -> None:
    config = PEERS[algo][0]
    rows = {"distrl 1 rank": [], "SB3": []}
    if algo == "a2c":
        rows["distrl 2 ranks (torchrun)"] = []
    sb3 = ensure_sb3()
    for seed in seeds:  # interleaved: the machine is noisy
        rows["distrl 1 rank"].append(distrl_run(config, 1, tmp / f"{algo}-1-{seed}", seed))
        rows["SB3"].append(sb3_run(sb3, algo, tmp / f"sb3-{algo}-{seed}", seed))
        if algo == "a2c":
            rows["distrl 2 ranks (torchrun)"].append(distrl_run(config, 2, tmp / f"{algo}-2-{seed}", seed))
    rule, _ = stop_rule(config)
    print(f"\n## {algo.upper()}: `{config.relative_to(REPO)}` vs SB3, stopped at {rule.target:g} "
          f"(a check of {rule.episodes} episodes every {rule.every_env_steps:,} env steps)\n")  # fmt: skip
    print("| trainer | seeds | wall s per seed | median wall s | env steps at stop | stopped by the rule |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name, runs in rows.items():
        walls = " / ".join(f"{r['wall_s']:.1f}" for r in runs)
        steps = " / ".join(f"{r['env_steps']:,}" for r in runs)
        median = statistics.median(r["wall_s"] for r in runs)
        stopped = f"{sum(r['stopped'] for r in runs)}/{len(runs)}"
        print(f"| {name} | {seeds} | {walls} | {median:.1f} | {steps} | {stopped} |")
    ratio = statistics.median(r["wall_s"] for r in rows["SB3"]) / statistics.median(
        r["wall_s"] for r in rows["distrl 1 rank"]
    )
    print(f"\nSB3 / distrl 1 rank, median wall: **{ratio:.2f}x**")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=list(PEERS), default=list(PEERS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2, 3])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for algo in args.only:
            compare(algo, args.seeds, Path(tmp))


if __name__ == "__main__":
    main()
