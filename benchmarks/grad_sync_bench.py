"""Gradient synchronisation on 2 CPU ranks (gloo): one flat bucket vs DDP, inside a real PPO step.

For each network size, times full PPO minibatch steps (forward, backward, gradient sync, clip,
Adam) on each rank with:
  * flat bucket + torch.distributed.all_reduce
  * flat bucket + recursive doubling over gloo's isend/irecv
  * flat bucket + recursive doubling over direct TCP sockets (distrl's default on gloo)
  * torch DistributedDataParallel (bucketed all_reduce overlapped with backward)
and the same step without any synchronisation as the floor.

Usage: python benchmarks/grad_sync_bench.py   (re-launches itself under torchrun with 2 ranks)
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import gymnasium as gym
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from distrl.algos.ppo import PPO
from distrl.algos.ppo_config import PPOConfig
from distrl.comm import TorchGroupComm
from distrl.config.sections import ModelConfig
from distrl.models.actor_critic import ActorCritic
from distrl.socket_sum import SocketSum
from distrl.storage.rollout import RolloutBatch

STEPS = 300
MINIBATCH = 256


class ActionStats(nn.Module):
    """DDP needs a forward call to arm its reducer: route the PPO loss inputs through one."""

    def __init__(self, policy: ActorCritic) -> None:
        super().__init__()
        self.policy = policy

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, *memory: torch.Tensor | None):
        return self.policy.action_stats(obs, actions, *memory)


def make_batch(policy: ActorCritic, obs_dim: int) -> RolloutBatch:
    obs = torch.randn(MINIBATCH, obs_dim)
    noise = torch.rand(policy.noise_shape(MINIBATCH))
    actions, log_probs, values, _ = policy.act(obs, noise, policy.initial_state(MINIBATCH))
    return RolloutBatch(obs, actions, log_probs, values, torch.randn(MINIBATCH), torch.randn(MINIBATCH))


def time_steps(ppo: PPO, batch: RolloutBatch) -> float:
    for _ in range(20):
        ppo.minibatch_step(batch)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(STEPS):
        ppo.minibatch_step(batch)
    return (time.perf_counter() - start) / STEPS * 1e6


def bench(hidden: list[int], socket_sum: SocketSum) -> dict[str, float]:
    torch.manual_seed(0)
    obs_dim = 17
    policy = ActorCritic(obs_dim, gym.spaces.Box(-1, 1, (6,)), ModelConfig(hidden_sizes=hidden))
    batch = make_batch(policy, obs_dim)
    cfg = PPOConfig()
    results = {"no sync (floor)": time_steps(PPO(policy, cfg, num_minibatches=1), batch)}
    for algorithm in ("all_reduce", "recursive_doubling", "socket"):
        comm = TorchGroupComm(torch.device("cpu"), socket_sum=socket_sum, sum_algorithm=algorithm)
        results[f"flat bucket, {algorithm}"] = time_steps(
            PPO(policy, cfg, num_minibatches=1, gradient_sync=comm.sum_gradients_), batch
        )
    ddp = DistributedDataParallel(ActionStats(policy))
    ddp_ppo = PPO(policy, cfg, num_minibatches=1)
    ddp_ppo.policy = _DDPPolicy(policy, ddp)
    results["DDP"] = time_steps(ddp_ppo, batch)
    results["params"] = sum(p.numel() for p in policy.parameters())
    return results


class _DDPPolicy:
    """Stands in for the policy inside PPO.loss so action_stats runs through DDP's forward."""

    def __init__(self, policy: ActorCritic, ddp: DistributedDataParallel) -> None:
        self._policy, self._ddp = policy, ddp

    def action_stats(self, obs: torch.Tensor, actions: torch.Tensor, *memory: torch.Tensor | None):
        return self._ddp(obs, actions, *memory)


def main() -> None:
    if "RANK" not in os.environ:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
               "--master_addr=127.0.0.1", "--master_port=29544", __file__]  # fmt: skip
        sys.exit(subprocess.call(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}))
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, port = dist.get_rank(), int(os.environ["MASTER_PORT"]) + 1
    store = dist.TCPStore("127.0.0.1", port, 2, is_master=rank == 0)
    socket_sum = SocketSum(store, rank, 2, "127.0.0.1", timeout_s=60)
    rows = {str(h): bench(h, socket_sum) for h in ([64, 64], [256, 256])}
    socket_sum.close()
    if dist.get_rank() == 0:
        print(f"2 ranks, gloo, {os.cpu_count()} cores; microseconds per PPO minibatch step "
              f"({MINIBATCH} samples), mean over {STEPS} steps")  # fmt: skip
        names = [k for k in next(iter(rows.values())) if k != "params"]
        print(
            "| method | " + " | ".join(f"MLP {h} ({int(r['params'])} params)" for h, r in rows.items()) + " |"
        )
        print("| --- " * (len(rows) + 1) + "|")
        for name in names:
            print(f"| {name} | " + " | ".join(f"{r[name]:.0f}" for r in rows.values()) + " |")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
