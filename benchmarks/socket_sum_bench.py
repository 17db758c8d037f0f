"""The socket sum of this tree against the one of an earlier commit, side by side on 2 ranks.

Both transports are connected at once and timed in interleaved blocks (the order alternating
block by block), so the machine's drift hits both alike; the medians of 20 blocks are compared:
raw sums of the CartPole actor-critic's flat gradient bucket and of a 256x256 one, and whole PPO
minibatch steps of the CartPole network (256 samples: forward, backward, sync, clip, Adam).

Usage: python benchmarks/socket_sum_bench.py [--ref GIT_REF]   (default: HEAD; re-launches itself
under torchrun with 2 ranks)
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import gymnasium as gym
import torch
import torch.distributed as dist

from distrl import socket_sum
from distrl.algos.ppo import PPO, PPOConfig
from distrl.config.sections import ModelConfig
from distrl.models.actor_critic import ActorCritic

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grad_sync_bench import make_batch  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SIZES = {"CartPole MLP [64, 64] bucket": 4740, "MLP [256, 256] bucket": 71000}
BLOCKS, SUMS_PER_BLOCK, STEPS_PER_BLOCK = 20, 200, 30
PPO_STEP = "PPO minibatch step, CartPole MLP [64, 64]"


def load_reference(ref: str) -> object:
    """``src/distrl/socket_sum.py`` as it was at ``ref``, as a module of its own."""
    source = subprocess.run(
        ["git", "show", f"{ref}:src/distrl/socket_sum.py"],
        cwd=REPO,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp()) / "reference_socket_sum.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("reference_socket_sum", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default="HEAD")
    args = parser.parse_args()
    if "RANK" not in os.environ:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
               "--master_port=29577", __file__, "--ref", args.ref]  # fmt: skip
        sys.exit(subprocess.call(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}))
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]) + 1, 2, is_master=rank == 0)
    transports = {
        args.ref: load_reference(args.ref).SocketSum(
            dist.PrefixStore("ref", store), rank, 2, "127.0.0.1", 60, 0.05
        ),
        "this tree": socket_sum.SocketSum(dist.PrefixStore("new", store), rank, 2, "127.0.0.1", 60, 0.05),
    }
    results = {}
    for label, size in SIZES.items():
        values = torch.zeros(size)  # zeros stay zeros: no overflow over thousands of sums
        times: dict[str, list[float]] = {name: [] for name in transports}
        for block in range(BLOCKS):
            for name in list(transports)[:: 1 if block % 2 == 0 else -1]:
                for _ in range(20):  # warm-up
                    transports[name].sum_(values)
                start = time.perf_counter()
                for _ in range(SUMS_PER_BLOCK):
                    transports[name].sum_(values)
                times[name].append((time.perf_counter() - start) / SUMS_PER_BLOCK * 1e6)
        results[label] = {name: statistics.median(t) for name, t in times.items()}
    results[PPO_STEP] = ppo_step_times(transports)
    if rank == 0:
        print(f"2 ranks, {os.cpu_count()} cores; microseconds per sum, median of {BLOCKS} interleaved blocks")
        print(f"| bucket | {args.ref} | this tree | this tree / {args.ref} |")
        print("| --- | --- | --- | --- |")
        for label, r in results.items():
            ref, new = r[args.ref], r["this tree"]
            what = f"{label} ({SIZES[label]} floats)" if label in SIZES else label
            print(f"| {what} | {ref:.1f} | {new:.1f} | {new / ref:.3f} |")
    dist.destroy_process_group()


def ppo_step_times(transports: dict[str, object]) -> dict[str, float]:
    """Median microseconds per PPO minibatch step with each transport as the gradient sync."""

    def make_policy() -> ActorCritic:
        torch.manual_seed(0)
        return ActorCritic(4, gym.spaces.Discrete(2), ModelConfig(hidden_sizes=[64, 64]))

    batch = make_batch(make_policy(), obs_dim=4)
    # One policy per transport: each PPO's flat gradient buffer owns its parameters' .grad.
    ppos = {name: PPO(make_policy(), PPOConfig(), 1, gradient_sync=t.sum_) for name, t in transports.items()}
    times: dict[str, list[float]] = {name: [] for name in transports}
    for block in range(BLOCKS):
        for name in list(transports)[:: 1 if block % 2 == 0 else -1]:
            ppos[name].minibatch_step(batch)  # warm-up
            start = time.perf_counter()
            for _ in range(STEPS_PER_BLOCK):
                ppos[name].minibatch_step(batch)
            times[name].append((time.perf_counter() - start) / STEPS_PER_BLOCK * 1e6)
    return {name: statistics.median(t) for name, t in times.items()}


if __name__ == "__main__":
    main()
