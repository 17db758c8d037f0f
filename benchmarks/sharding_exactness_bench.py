"""Sharded learners take the steps replicated ones take: 10 PPO updates and 10 GRPO updates in
float32, with uneven shares, on 2 sharded ranks, 2 replicated ranks and 1 rank; the largest
difference of any final weight (and Adam moment) between each pair.

Each run is ``torchrun`` of ``distrl.train`` with a checkpoint at its end, read whole
(``io.shards.read_whole`` for a sharded one). PPO: ``configs/cartpole_ppo.yaml`` with 3 envs (2
and 1 on 2 ranks) and minibatches of 32 samples; its ranks draw their minibatches from their own
samples, so 2 ranks do not take 1 rank's steps (by design: DD-PPO's ranks shuffle apart).
GRPO: ``configs/grpo_reverse.yaml`` with 5 prompts a step (3 and 2 on 2 ranks), the KL penalty on
and 2 micro-batches; its 2 ranks take 1 rank's steps, up to float32 sums in another order.

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
RUNS = {"1 rank": (1, "none"), "2 ranks replicated": (2, "none"), "2 ranks sharded": (2, "fsdp")}
PAIRS = [
    ("2 ranks sharded", "2 ranks replicated"),
    ("2 ranks replicated", "1 rank"),
    ("2 ranks sharded", "1 rank"),
]


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


def largest_gaps(one: dict[str, torch.Tensor], other: dict[str, torch.Tensor]) -> dict[str, float]:
    """The largest difference of a weight (``model``) and of an optimiser tensor (``optimizer``)."""
    if other.keys() != one.keys():
        sys.exit("the runs saved other tensors")
    gaps = {"model": 0.0, "optimizer": 0.0}
    for name, tensor in one.items():
        part = name.split("/")[0]
        if tensor.numel():
            gaps[part] = max(gaps[part], float((other[name].double() - tensor.double()).abs().max()))
    return gaps


def main() -> None:
    print("| workload | runs compared | largest weight difference | largest Adam-state difference |")
    print("| --- | --- | --- | --- |")
    for workload, args in WORKLOADS.items():
        saved = {run: final_tensors(ranks, sharding, args) for run, (ranks, sharding) in RUNS.items()}
        for first, second in PAIRS:
            gaps = largest_gaps(saved[second], saved[first])
            print(f"| {workload} | {first} vs {second} | {gaps['model']:.1e} | {gaps['optimizer']:.1e} |")


if __name__ == "__main__":
    main()
