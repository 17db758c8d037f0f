"""APPO on Atari Pong against Sample Factory: agent steps per second on 2 cores, with the mean
sample age beside every asynchronous figure.

Contenders, all on EnvPool's C++ Pong-v5 (frame skip 4, 84x84 grey, 4 frames stacked, episodic
life, rewards clipped), 8 envs x 128-step rollouts, batches of 1,024 samples trained for 4 epochs
of 4 minibatches of 256, the Nature CNN, float32 everywhere, CPU:
  * distrl APPO: one rank with one collector process one update ahead (``algo.name=appo
    collect.processes=1 collect.lag=1``; configs/atari_pong_ppo.yaml otherwise);
  * distrl PPO on 2 torchrun ranks (4 envs each) and on 1 rank: lockstep, for reference;
  * Sample Factory 2.1.1's APPO (``sf_examples.envpool.atari.train_envpool_atari``, its own venv
    benchmarks/.sample-factory-venv: sample-factory 2.1.1, gymnasium 0.29, numpy<2, envpool
    0.8.4, whose wheel ships the ROMs, shimmy for EnvPool's gym spaces), 1 rollout worker stepping
    one EnvPool of 8 envs (``--env_agents 8``), rollout 128, ``--batch_size 256
    --num_batches_per_epoch 4 --num_epochs 4``, its Atari defaults otherwise (its Nature-CNN
    encoder ``convnet_atari``, lr 2.5e-4, clip 0.1, GAE: ``with_vtrace`` off, as its Atari
    examples run; with ``--with_vtrace True --recurrence 128`` its learner raises in 2.1.1
    (``_record_summaries`` reads ``mb.advantages``, which V-trace does not set) and the run hangs).
    Its own processes: a learner, an inference worker and the rollout worker.
  * RLlib 2.60's APPO (new API stack, its own venv benchmarks/.rllib-venv: ``ray[rllib]==2.60.0``
    and ale-py, whose wheel ships the ROMs): one env runner with 8 envs (ale-py's Pong through
    RLlib's ``wrap_atari_for_new_api_stack``: frame skip 4 with max-pooling, 84x84 grey, episodic
    life, no-op and fire resets; 4 frames stacked by its frame-stacking connectors; rewards
    clipped), rollout fragments of 128, the learner in the driver process, the same Nature CNN
    (32x8x8/4, 64x4x4/2, 64x3x3/1, 512 units, shared by actor and critic), V-trace on, lr
    2.5e-4, clip 0.1, gradient-norm clip 0.5. Its circular buffer of batches of 256 with 4
    iterations a batch gives each sample 4 passes and 16 optimiser steps per 1,024 samples, as 4
    epochs of 4 minibatches do. Its env is ale-py's, not EnvPool's (RLlib steps Gymnasium envs).

The rate is the steady state: distrl's from ``metrics.jsonl`` rows after the first fifth of the
updates; Sample Factory's from its log's "Total num frames" lines (every 5 s, with their times;
``--summaries_use_frameskip False``: agent steps) after the first fifth. Sample ages: distrl's
``sample_age`` (updates), Sample Factory's reported policy lag ("avg", in optimiser steps: 16 a
batch here) divided by 16. Repeats are interleaved; medians.

RLlib's rate is from its lifetime env steps after each ``algo.train()`` (after the first fifth);
its policy lag is not reported by the new API stack ("–").

Usage: python benchmarks/appo_pong_bench.py [--repeats 3] [--updates 16]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cartpole_bench import CommandFailed, distrl_cmd, ensure_venv, metrics_rows, run_timed  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "atari_pong_ppo.yaml"
SF_VENV = REPO / "benchmarks" / ".sample-factory-venv"
RLLIB_VENV = REPO / "benchmarks" / ".rllib-venv"
STEPS_PER_UPDATE = 8 * 128
SF_STEPS_PER_BATCH = 4 * 4
"""Sample Factory's policy version counts optimiser steps: 4 epochs of 4 minibatches a batch."""
COMMON = [
    "env.backend=envpool", "env.id=Pong-v5", "train.mixed_precision=fp32", "train.device=cpu",
    "log.progress=false", "log.tensorboard=false", "checkpoint.interval_steps=1000000000",
]  # fmt: skip
DISTRL = {
    # name: (torchrun ranks, EnvPool threads per rank, overrides)
    "distrl APPO, 1 rank + 1 collector process, `collect.lag=1`": (
        1, 1, ["algo.name=appo", "collect.processes=1", "collect.lag=1"]
    ),
    "distrl PPO, 2 torchrun ranks": (2, 1, []),
    "distrl PPO, 1 rank": (1, 2, []),
}  # fmt: skip
SAMPLE_FACTORY = "Sample Factory 2.1.1 APPO"
RLLIB = "RLlib 2.60 APPO"
RLLIB_DRIVER = r"""
import json, os, sys, time

os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
spec = json.loads(sys.argv[1])

import ale_py
import gymnasium as gym
import ray
import ray.tune.trainable.trainable as trainable
import torch
from ray.rllib.algorithms.appo import APPOConfig
from ray.rllib.connectors.env_to_module.frame_stacking import FrameStackingEnvToModule
from ray.rllib.connectors.learner.frame_stacking import FrameStackingLearner
from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack
from ray.rllib.utils.metrics import ENV_RUNNER_RESULTS, NUM_ENV_STEPS_SAMPLED_LIFETIME
from ray.tune.registry import register_env

torch.set_num_threads(1)
trainable.DEFAULT_STORAGE_PATH = spec["work_dir"]  # not ~/ray_results
ray.init(num_cpus=2, include_dashboard=False, _temp_dir=spec["ray_temp_dir"], log_to_driver=False)


def pong(config):
    gym.register_envs(ale_py)
    env = gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0, full_action_space=False)
    return wrap_atari_for_new_api_stack(env, dim=84, framestack=None)


register_env("pong", pong)
config = (
    APPOConfig()
    .environment("pong", clip_rewards=True)
    .env_runners(
        num_env_runners=1, num_envs_per_env_runner=8, rollout_fragment_length=128,
        env_to_module_connector=lambda env, spaces=None, device=None: FrameStackingEnvToModule(num_frames=4),
    )
    .learners(num_learners=0, learner_connector=lambda *args, **kwargs: FrameStackingLearner(num_frames=4))
    .training(
        train_batch_size_per_learner=256, circular_buffer_num_batches=4,
        circular_buffer_iterations_per_batch=4, lr=2.5e-4, clip_param=0.1, vtrace=True,
        use_kl_loss=False, grad_clip=0.5, grad_clip_by="global_norm", vf_loss_coeff=0.5,
        entropy_coeff=0.01,
    )
    .rl_module(
        model_config=DefaultModelConfig(
            conv_filters=[[32, 8, 4], [64, 4, 2], [64, 3, 1]], conv_activation="relu",
            head_fcnet_hiddens=[512], vf_share_layers=True,
        )
    )
    .debugging(seed=1)
)
algo = config.build_algo()
start = time.perf_counter()
points, steps = [], 0
while steps < spec["budget"]:
    result = algo.train()
    steps = int(result[ENV_RUNNER_RESULTS].get(NUM_ENV_STEPS_SAMPLED_LIFETIME, 0))
    points.append([steps, time.perf_counter() - start])
algo.stop()
ray.shutdown()
print(json.dumps({"points": points}))
"""
SF_LINE = re.compile(
    r"^\[(?P<time>[\d-]+ [\d:,]+)\].*Total num frames: (?P<frames>\d+).*avg: (?P<lag>[-\d.]+)"
)


def ensure_sample_factory() -> Path:
    packages = ["sample-factory==2.1.1", "gymnasium==0.29.1", "numpy<2", "envpool==0.8.4", "gym==0.26.2"]
    return ensure_venv(SF_VENV, [*packages, "shimmy<2"])


def ensure_rllib() -> Path:
    return ensure_venv(RLLIB_VENV, ["ray[rllib]==2.60.0", "ale-py", "opencv-python-headless"])


def steady(points: list[tuple[float, float]]) -> float:
    """Rate from (count, seconds) points, the first fifth left out as warm-up."""
    kept = points[len(points) // 5 :]
    (first, first_s), (last, last_s) = kept[0], kept[-1]
    return (last - first) / (last_s - first_s)


def distrl_run(
    ranks: int, threads: int, overrides: list[str], updates: int, out: Path
) -> tuple[float, float]:
    kwargs = f"env.kwargs={{episodic_life: true, reward_clip: true, num_threads: {threads}}}"
    args = ["--total-steps", str(STEPS_PER_UPDATE * updates), "--seed", "1", *COMMON, kwargs, *overrides]
    run_timed(distrl_cmd(ranks, out, *args, config=CONFIG), REPO)
    rows = metrics_rows(out)
    ages = [row.get("sample_age", 0.0) for row in rows[len(rows) // 5 :]]
    return steady([(row["global_step"], row["time_s"]) for row in rows]), statistics.mean(ages)


def sample_factory_run(python: Path, updates: int, out: Path) -> tuple[float, float]:
    _, stdout = run_timed(
        [str(python), "-m", "sf_examples.envpool.atari.train_envpool_atari", "--env", "atari_pong",
         "--experiment", "pong", "--train_dir", str(out), "--device", "cpu", "--seed", "1",
         "--num_workers", "1", "--num_envs_per_worker", "1", "--env_agents", "8", "--rollout", "128",
         "--batch_size", "256", "--num_batches_per_epoch", "4", "--num_epochs", "4",
         "--summaries_use_frameskip", "False", "--train_for_env_steps", str(STEPS_PER_UPDATE * updates),
         "--save_every_sec", "100000", "--save_best_every_sec", "100000"],
        REPO,
    )  # fmt: skip
    lines = [
        m for line in (out / "pong" / "sf_log.txt").read_text().splitlines() if (m := SF_LINE.match(line))
    ]
    points = [
        (float(m["frames"]), datetime.strptime(m["time"], "%Y-%m-%d %H:%M:%S,%f").timestamp()) for m in lines
    ]
    points = [p for p in points if p[0] > 0]
    lags = [float(m["lag"]) for m in lines[len(lines) // 5 :] if float(m["lag"]) >= 0]
    return steady(points), statistics.mean(lags) / SF_STEPS_PER_BATCH if lags else float("nan")


def rllib_run(python: Path, updates: int, out: Path) -> tuple[float, float]:
    out.mkdir(parents=True, exist_ok=True)
    spec = {"budget": STEPS_PER_UPDATE * updates, "work_dir": str(out), "ray_temp_dir": str(out / "ray")}
    _, stdout = run_timed([str(python), "-c", RLLIB_DRIVER, json.dumps(spec)], REPO)
    points = [(float(steps), seconds) for steps, seconds in json.loads(stdout.splitlines()[-1])["points"]]
    return steady([p for p in points if p[0] > 0]), float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--updates", type=int, default=16, help=f"batches of {STEPS_PER_UPDATE:,} agent steps"
    )
    args = parser.parse_args()
    python, rllib = ensure_sample_factory(), ensure_rllib()
    results: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="appo-pong-") as tmp_name:
        tmp = Path(tmp_name)
        try:
            for repeat in range(args.repeats):
                for index, (name, (ranks, threads, overrides)) in enumerate(DISTRL.items()):
                    run = distrl_run(ranks, threads, overrides, args.updates, tmp / f"{repeat}-{index}")
                    results.setdefault(name, []).append(run)
                    print(f"{name}: {run[0]:.0f} agent steps/s, mean sample age {run[1]:.2f}", flush=True)
                run = sample_factory_run(python, args.updates, tmp / f"{repeat}-sf")
                results.setdefault(SAMPLE_FACTORY, []).append(run)
                print(
                    f"{SAMPLE_FACTORY}: {run[0]:.0f} agent steps/s, mean policy lag {run[1]:.2f}", flush=True
                )
                run = rllib_run(rllib, args.updates, tmp / f"{repeat}-rllib")
                results.setdefault(RLLIB, []).append(run)
                print(f"{RLLIB}: {run[0]:.0f} agent steps/s", flush=True)
        except CommandFailed as exc:
            sys.exit(str(exc))
    print(
        f"\nmachine: {os.cpu_count()} cores; {args.repeats} interleaved repeats of {args.updates} batches "
        f"({STEPS_PER_UPDATE:,} agent steps each), steady state\n"
    )
    print("| contender | median agent steps/s | per repeat | mean sample age (updates) | / the faster peer |")
    print("| --- | --- | --- | --- | --- |")
    peer = max(statistics.median(rate for rate, _ in results[name]) for name in (SAMPLE_FACTORY, RLLIB))
    for name, runs in results.items():
        rate = statistics.median(r for r, _ in runs)
        each = " / ".join(f"{r:.0f}" for r, _ in runs)
        age = statistics.mean(a for _, a in runs)
        shown = "–" if age != age else f"{age:.2f}"  # NaN: not reported
        print(f"| {name} | {rate:.0f} | {each} | {shown} | {rate / peer:.2f}x |")


if __name__ == "__main__":
    main()
