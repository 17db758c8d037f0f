"""Raw env steps/s: distrl's torch CartPole-v1 against Gymnasium's SyncVectorEnv, random actions.

Times only env stepping (with same-step auto-reset on both sides), no policy, on one CPU thread
each. Each side runs for about ``--seconds`` after a short warm-up; prints steps/s and their ratio.

Usage: python benchmarks/torch_env_bench.py [--num-envs 4096] [--seconds 3] [--device cpu|cuda]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from distrl.envs.torch_envs import TorchCartPole

WARMUP_STEPS = 5


def steps_per_second(
    step: Callable[[], None], finish: Callable[[], None], num_envs: int, seconds: float
) -> float:
    """Call ``step`` for about ``seconds`` after a warm-up; ``finish`` waits for queued device work."""
    for _ in range(WARMUP_STEPS):
        step()
    finish()
    calls = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        step()
        calls += 1
    finish()
    return calls * num_envs / (time.perf_counter() - start)


def torch_cartpole_sps(num_envs: int, seconds: float, device: torch.device, dtype: torch.dtype) -> float:
    env = TorchCartPole(num_envs, device=device, dtype=dtype)
    env.reset()
    generator = torch.Generator(device=device).manual_seed(0)

    def step() -> None:
        env.step(torch.randint(0, 2, (num_envs,), generator=generator, device=device))

    finish = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    return steps_per_second(step, finish, num_envs, seconds)


def gymnasium_sync_sps(num_envs: int, seconds: float) -> float:
    env = SyncVectorEnv(
        [lambda: gym.make("CartPole-v1") for _ in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP
    )
    env.reset(seed=0)
    rng = np.random.default_rng(0)

    def step() -> None:
        env.step(rng.integers(0, 2, size=num_envs))

    sps = steps_per_second(step, lambda: None, num_envs, seconds)
    env.close()
    return sps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-envs", type=int, default=4096)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    # One CPU thread, like Gymnasium's loop; on a shared machine more threads only oversubscribe cores.
    torch.set_num_threads(1)
    gym_sps = gymnasium_sync_sps(args.num_envs, args.seconds)
    print(f"gymnasium SyncVectorEnv, {args.num_envs} envs: {gym_sps:,.0f} steps/s")
    for dtype in (torch.float32, torch.float64):
        sps = torch_cartpole_sps(args.num_envs, args.seconds, device, dtype)
        print(
            f"torch CartPole on {device} ({dtype}), {args.num_envs} envs: {sps:,.0f} steps/s "
            f"= {sps / gym_sps:.0f}x Gymnasium"
        )


if __name__ == "__main__":
    main()
