"""Sharded learners take the steps replicated ones take: 10 PPO updates and 10 GRPO updates in
float32, with uneven shares, on 1 rank, 2 replicated ranks and 2 sharded ranks; the largest
difference of any final weight (and Adam moment) from the 1-rank run's.

Each run is ``torchrun`` of ``distrl.train`` with a checkpoint at its end, read whole
(``io.shards.read_whole`` for a sharded one). PPO: ``configs/cartpole_ppo.yaml`` with 3 envs (2
and 1 on 2 ranks) and minibatches of 32 samples. GRPO: ``configs/grpo_reverse.yaml`` with 5 prompts a
step (3 and 2 on 2 ranks), the KL penalty on and 2 micro-batches.

Usage: python benchmarks/sharding_exactness_bench.py
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
COMMON = ["train.stop_return=null", "log.tensorboard=false", "log.progress=false", "eval.every=1000"]
WORKLOADS = {
    "PPO, CartPole, 10 updates": [
        "--config", str(REPO / "configs" / "cartpole_ppo.yaml"), "env.num_envs=3", "algo.rollout_steps=32",
        "algo.minibatch_size=32", "algo.update_epochs=2", "train.total_steps=960",
        "checkpoint.interval_steps=960",
    ],
    "GRPO, reverse, 10 updates": [
        "--config", str(REPO / "configs" / "grpo_reverse.yaml"), "algo.num_prompts_per_step=5",
        "algo.num_generations_per_prompt=3", "algo.max_new_tokens=6", "algo.kl_coef=0.1",
        "train.gradient_accumulation_steps=2", "train.mixed_precision=fp32", "train.total_steps=150",
        "checkpoint.interval_steps=150",
    ],
}  # fmt: skip
CONTENDERS = {"2 ranks, replicated": (2, "none"), "2 ranks, sharded (fsdp)": (2, "fsdp")}


def final_tensors(ranks: int, sharding: str, args: list[str]) -> dict[str, torch.Tensor]:
    """The run's final model and optimiser tensors, by name."""
    from distrl.io import checkpoint as ckpt
    from distrl.io import shards

    with tempfile.TemporaryDirectory() as run_dir:
        command = [
            sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={ranks}", "--nnodes=1",
            "--master_addr=127.0.0.1", "--master_port=29641", "-m", "distrl.train", *args, *COMMON,
            f"train.sharding={sharding}", "--run-dir", run_dir, "--distributed",
        ]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, cwd=REPO, check=False)
        if done.returncode != 0:
            sys.exit(f"{ranks} rank(s), {sharding}: failed\n{done.stderr[-3000:]}")
        checkpoint = ckpt.resolve_checkpoint(Path(run_dir))
        tensors = {}
        for part in ("model", "optimizer"):
            if (checkpoint / part).is_dir():
                found = shards.read_whole(checkpoint / part)
            else:
                found = ckpt.tensors_from_bytes((checkpoint / f"{part}.safetensors").read_bytes())
            tensors.update({f"{part}/{name}": tensor for name, tensor in found.items()})
        return tensors


def main() -> None:
    print("| workload | contender | largest weight difference from 1 rank | largest Adam-moment difference |")
    print("| --- | --- | --- | --- |")
    for workload, args in WORKLOADS.items():
        one = final_tensors(1, "none", args)
        for contender, (ranks, sharding) in CONTENDERS.items():
            other = final_tensors(ranks, sharding, args)
            if other.keys() != one.keys():
                sys.exit(f"{workload}, {contender}: other tensors than 1 rank's")
            gaps = {part: 0.0 for part in ("model", "optimizer")}
            for name, tensor in one.items():
                part = name.split("/")[0]
                gap = float((other[name].double() - tensor.double()).abs().max()) if tensor.numel() else 0.0
                gaps[part] = max(gaps[part], gap)
            print(f"| {workload} | {contender} | {gaps['model']:.1e} | {gaps['optimizer']:.1e} |")


if __name__ == "__main__":
    main()
