"""What any synchronous data-parallel trainer can get from this machine's cores: lockstep vs free.

Runs the same fixed work (PPO minibatch steps of the CartPole network, 256 samples, no gradient
exchange) in three ways and counts steps per second:
  * solo: one process;
  * free: two processes at once that never wait for each other (the machine's 2-process ceiling);
  * lockstep: two processes that meet after every ``k`` steps (a 1-float sum over distrl's
    sockets, the transport DD-PPO's gradient sync uses), as DD-PPO's ranks meet at every
    minibatch (k=1, ~2 ms apart) and after every rollout (k=10, ~20 ms apart), once sleeping in
    select() while waiting and once busy-polling for up to 50 ms first (distrl's default,
    ``comm.sync_spin_ms``).
Lockstep / free is what waiting for the slower process costs when the cores' speed varies over
time independently of each other (a busy hypervisor, sibling hyperthreads on the host): the
exchanged data is one float, so it measures the waiting, not the transfer. The runs are
interleaved ``--repeats`` times and medians reported.

Usage: python benchmarks/lockstep_bench.py [--steps 3000] [--every 1 10] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import torch
import torch.distributed as dist

from distrl.algos.ppo import PPO
from distrl.algos.ppo_config import PPOConfig
from distrl.config.sections import ModelConfig
from distrl.launch.process_group import AUTO_SPIN_S
from distrl.models.actor_critic import ActorCritic
from distrl.socket_sum import SocketSum
from distrl.storage.rollout import RolloutBatch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cartpole_bench import env_without_launcher  # noqa: E402
from grad_sync_bench import make_batch  # noqa: E402

WARMUP_STEPS = 50


def make_ppo() -> tuple[PPO, RolloutBatch]:
    torch.manual_seed(0)
    policy = ActorCritic(4, gym.spaces.Discrete(2), ModelConfig(hidden_sizes=[64, 64]))
    return PPO(policy, PPOConfig(), num_minibatches=1), make_batch(policy, obs_dim=4)


def worker(steps: int, every: int, spin_s: float) -> None:
    """One process's timed loop; ``every`` = 0: never meet the other process."""
    torch.set_num_threads(1)
    ppo, batch = make_ppo()
    meet = None
    if "RANK" in os.environ:
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]) + 1, 2, is_master=rank == 0)
        meet = SocketSum(store, rank, 2, "127.0.0.1", timeout_s=60, spin_s=spin_s)
    for _ in range(WARMUP_STEPS):
        ppo.minibatch_step(batch)
    token = torch.zeros(1)
    if meet is not None:
        meet.sum_(token)  # start the clocks together
    start = time.perf_counter()
    for step in range(1, steps + 1):
        ppo.minibatch_step(batch)
        if meet is not None and every and step % every == 0:
            meet.sum_(token)
    line = json.dumps({"steps_per_s": steps / (time.perf_counter() - start)}) + "\n"
    os.write(1, line.encode())  # one write: the two ranks share the pipe
    if meet is not None:
        meet.sum_(token)  # leave together
        meet.close()
        dist.destroy_process_group()


def run(ranks: int, steps: int, every: int, spin_s: float = 0.0) -> float:
    """Summed steps/s of ``ranks`` processes (1: plain python, 2: torchrun)."""
    me = [os.path.abspath(__file__), "--worker", "--steps", str(steps), "--every", str(every)]
    me += ["--spin-s", str(spin_s)]
    launcher = [sys.executable]
    if ranks > 1:
        launcher += ["-m", "torch.distributed.run", f"--nproc_per_node={ranks}",
                     "--master_addr=127.0.0.1", "--master_port=29564"]  # fmt: skip
    out = subprocess.run(
        launcher + me, capture_output=True, text=True, check=True, env=env_without_launcher()
    ).stdout
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert len(rows) == ranks, out
    return sum(r["steps_per_s"] for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--every", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--spin-s", type=float, default=0.0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.steps, args.every[0], args.spin_s)
        return
    modes = {"solo": (1, 0, 0.0), "free (2 processes)": (2, 0, 0.0)}
    for k in args.every:
        modes[f"lockstep every {k}, sleeping"] = (2, k, 0.0)
        modes[f"lockstep every {k}, busy-poll"] = (2, k, AUTO_SPIN_S)
    results: dict[str, list[float]] = {name: [] for name in modes}
    for _ in range(args.repeats):
        for name, (ranks, every, spin_s) in modes.items():
            results[name].append(run(ranks, args.steps, every, spin_s))
    solo = statistics.median(results["solo"])
    free = statistics.median(results["free (2 processes)"])
    print(f"{os.cpu_count()} cores; PPO minibatch steps/s (sum over processes), "
          f"medians of {args.repeats} interleaved runs of {args.steps} steps")  # fmt: skip
    print("| mode | steps/s | runs | / solo | / free |")
    print("| --- | --- | --- | --- | --- |")
    for name, values in results.items():
        median = statistics.median(values)
        runs = " / ".join(f"{v:.0f}" for v in values)
        print(f"| {name} | {median:.0f} | {runs} | {median / solo:.2f}x | {median / free:.2f} |")


if __name__ == "__main__":
    main()
