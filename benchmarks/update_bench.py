"""One PPO update at Isaac Lab's CartPole size, this tree against an earlier commit's, side by side.

The update alone: ``configs/cartpole_ppo_4096.yaml`` (4096 envs x 16 steps, 5 epochs x 4
minibatches, 32-32 ELU actor and critic) on a synthetic rollout of 65,536 samples, eager and with
``train.compile``, one torch thread. Each (tree, mode) runs in a process of its own, doing what a
training process does before it trains (``distrl.allocator`` where the tree has it), then one
untimed update (compilation) and ``--updates`` timed ones; the processes are interleaved
``--repeats`` times and the medians compared. Minor page faults per update are counted too.

Usage: python benchmarks/update_bench.py [--ref GIT_REF] [--repeats 5] [--updates 9]
(``--ref``: the commit to compare with, default HEAD; its ``src`` is exported with ``git archive``.)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "cartpole_ppo_4096.yaml"
MODES = ("eager", "compiled")


def time_updates(compiled: bool, updates: int) -> dict[str, float]:
    """Seconds per update (median) and minor page faults per update, in this process."""
    import gymnasium as gym
    import torch

    from distrl.algos.ppo import PPO
    from distrl.config.run import load_config
    from distrl.models.actor_critic import ActorCritic
    from distrl.storage.rollout import RolloutBatch

    if importlib.util.find_spec("distrl.allocator") is not None:
        from distrl.allocator import keep_freed_memory

        keep_freed_memory()
    torch.set_num_threads(1)
    cfg = load_config(CONFIG, [])
    policy = ActorCritic(4, gym.spaces.Discrete(2), cfg.model)
    ppo = PPO(policy, cfg.algo, cfg.algo.num_minibatches, compile_loss=compiled)
    rows = cfg.env.num_envs_per_rank * cfg.algo.rollout_steps
    generator = torch.Generator().manual_seed(0)
    batch = RolloutBatch(
        torch.randn(rows, 4, generator=generator),
        torch.randint(0, 2, (rows,), generator=generator).float(),
        *torch.randn(4, rows, generator=generator),
    )
    ppo.update(batch)
    seconds = []
    faults_before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(updates):
        start = time.perf_counter()
        ppo.update(batch)
        seconds.append(time.perf_counter() - start)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults_before
    return {"seconds": statistics.median(seconds), "faults": faults / updates}


def run_child(src: Path, mode: str, updates: int) -> dict[str, float]:
    command = [sys.executable, __file__, "--child", mode, "--updates", str(updates)]
    env = {**os.environ, "PYTHONPATH": str(src)}
    result = subprocess.run(command, env=env, check=False, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"update_bench: the {mode} run on {src} failed:\n{result.stderr}")
    return json.loads(result.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ref", default="HEAD")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--updates", type=int, default=9)
    parser.add_argument("--child", choices=MODES)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(time_updates(args.child == "compiled", args.updates)))
        return

    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(
            ["git", "-C", str(REPO), "archive", args.ref, "src"], check=True, capture_output=True
        )
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        trees = {args.ref: Path(tmp) / "src", "this tree": REPO / "src"}
        results: dict[tuple[str, str], list[dict[str, float]]] = {}
        for _ in range(args.repeats):
            for mode in MODES:
                for name, src in trees.items():
                    results.setdefault((name, mode), []).append(run_child(src, mode, args.updates))

    ref, runs = args.ref, f"{args.repeats} interleaved processes x {args.updates} updates"
    print(f"PPO update, `{CONFIG.name}`, medians of {runs}\n")
    print(f"| mode | {ref} s | this tree s | {ref} / this tree | faults per update, {ref} | this tree |")
    print("| --- | --- | --- | --- | --- | --- |")
    for mode in MODES:
        old, new = (results[(name, mode)] for name in trees)
        ref_s, new_s = (statistics.median(r["seconds"] for r in each) for each in (old, new))
        ref_f, new_f = (statistics.median(r["faults"] for r in each) for each in (old, new))
        print(f"| {mode} | {ref_s:.3f} | {new_s:.3f} | {ref_s / new_s:.2f}x | {ref_f:,.0f} | {new_f:,.0f} |")


if __name__ == "__main__":
    main()
