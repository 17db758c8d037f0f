"""Atari PPO on this machine: whole-loop agent steps per second of configs/atari_pong_ppo.yaml
(CleanRL's settings: 8 envs x 128 steps, 4 minibatches x 4 epochs, Nature CNN on 4x84x84 uint8
frames) in each ``train.mixed_precision``, interleaved repeats, medians; each run's peak resident
memory (``peak_rss.py``) and the bytes of observations its rollout stores.

    python benchmarks/atari_bench.py [--repeats 3] [--updates 5] [--precisions fp32 bf16]
                                     [--device cpu|cuda]

The rate is steady state: env steps over seconds from the end of the first update to the end of
the last (the first update, with its start-up, left out). The rollout's observation bytes are
read from the storage the collector allocates, beside what the same rollout took before images
were stored natively: float32, and a second float32 copy of the raw observations.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "atari_pong_ppo.yaml"


def run(precision: str, updates: int, device: str, out: Path) -> dict[str, float]:
    steps = 1024 * updates
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "peak_rss.py"), str(out / "rss"), "-m", "distrl", "train",
         "--config", str(CONFIG), "--run-dir", str(out / "run"), "--overwrite", "--total-steps", str(steps),
         "--device", device,
         "log.tensorboard=false", "log.progress=false", f"train.mixed_precision={precision}",
         "checkpoint.interval_steps=100000000"],
        check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=ROOT,
    )  # fmt: skip
    rows = [json.loads(line) for line in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    first, last = rows[0], rows[-1]
    rate = (last["global_step"] - first["global_step"]) / (last["time_s"] - first["time_s"])
    rss = json.loads((out / "rss" / "rank-0.json").read_text())["peak_rss_kib"] / 1024
    return {
        "steps_per_s": rate,
        "update_s": statistics.median(r["time/update"] for r in rows[1:]),
        "rss_mib": rss,
    }


def rollout_observation_bytes() -> tuple[int, int]:
    """(bytes the rollout stores now, bytes float32 storage with a raw copy took)."""
    import torch

    from distrl.config.run import load_config
    from distrl.envs import make_vec_env
    from distrl.envs.base import obs_tensor_dtype
    from distrl.storage.rollout import RolloutStorage

    cfg = load_config(CONFIG)
    env = make_vec_env(cfg.env, list(range(cfg.env.num_envs)))
    space = env.observation_space
    storage = RolloutStorage(
        cfg.algo.rollout_steps, env.num_envs, space.shape, (), torch.int64, torch.device("cpu"),
        obs_dtype=obs_tensor_dtype(space),
    )  # fmt: skip
    env.close()
    now = storage.obs.nbytes + (0 if storage.raw_obs is storage.obs else storage.raw_obs.nbytes)
    before = 2 * 4 * cfg.algo.rollout_steps * env.num_envs * math.prod(space.shape)
    return now, before


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--updates", type=int, default=5, help="updates of 1,024 agent steps per run")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"])
    parser.add_argument("--device", default="cpu", help="the learner's device: cpu or cuda")
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {p: [] for p in args.precisions}
    with tempfile.TemporaryDirectory(prefix="atari-bench-") as temp:
        for repeat in range(args.repeats):
            for precision in args.precisions:
                results[precision].append(
                    run(precision, args.updates, args.device, Path(temp) / f"{precision}-{repeat}")
                )
    now, before = rollout_observation_bytes()
    print(
        f"machine: {os.cpu_count()} cores, learner on {args.device}; "
        f"{args.repeats} interleaved repeats of {args.updates} updates\n"
    )
    print(
        "| train.mixed_precision | agent steps/s per repeat | median agent steps/s | median update s "
        "| median peak RSS MiB |"
    )
    print("| --- | --- | --- | --- | --- |")
    for precision, runs in results.items():
        rates = " / ".join(f"{r['steps_per_s']:.0f}" for r in runs)
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        print(
            f"| {precision} | {rates} | {med['steps_per_s']:.0f} | {med['update_s']:.2f} "
            f"| {med['rss_mib']:.0f} |"
        )
    print(
        f"\nRollout observations per rank: {now / 2**20:.1f} MiB stored (uint8, one copy); "
        f"{before / 2**20:.1f} MiB as float32 with a raw copy ({before / now:.0f}x)."
    )


if __name__ == "__main__":
    main()
