"""d3rlpy's (double) DQN on a distrl Parquet dataset: the contender in ``offline_bench.py``.

Runs with the Python of d3rlpy's own virtual environment (d3rlpy 2.8.1 pins gymnasium 1.0.0), so
it imports neither distrl nor anything of the main environment. Loads the whole dataset into a
``d3rlpy.dataset.MDPDataset`` (d3rlpy's design: every transition in memory on every process),
trains for ``--steps`` gradient steps with the hyperparameters ``offline_bench.py`` read from
distrl's config and, on rank 0, writes a JSON object to ``--out``: the load time, and training
samples per second after the first ``--warmup-steps`` steps.

Under torchrun each rank loads the whole dataset, samples its own share of every global batch
from it and averages gradients with d3rlpy's DDP (gloo).

Usage: python d3rlpy_offline_dqn.py --data DIR --steps N --warmup-steps W --hyper JSON --out FILE
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import d3rlpy
import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch


def load_dataset(data_dir: Path) -> d3rlpy.dataset.MDPDataset:
    """Every row of every file, in file order: the generator writes each episode's rows in order
    and each row's next state is the following row's state, which is how d3rlpy stores episodes."""
    columns = ["state_features", "action", "reward", "terminal", "possible_actions"]
    files = [str(path) for path in sorted(data_dir.glob("*.parquet"))]
    table = pq.ParquetDataset(files).read(columns=columns)
    rows = len(table)
    observations = pc.list_flatten(table["state_features"]).to_numpy().reshape(rows, -1)
    num_actions = len(table["possible_actions"][0])
    terminals = table["terminal"].to_numpy().astype(np.float32)
    return d3rlpy.dataset.MDPDataset(
        observations=observations,
        actions=table["action"].to_numpy(),
        rewards=table["reward"].to_numpy().astype(np.float32),
        terminals=terminals,
        timeouts=np.zeros_like(terminals),
        action_space=d3rlpy.ActionSpace.DISCRETE,
        action_size=num_actions,
    )


def make_dqn(hyper: dict[str, Any], batch_per_rank: int, distributed: bool) -> d3rlpy.algos.DQN:
    config_class = d3rlpy.algos.DoubleDQNConfig if hyper["double_q"] else d3rlpy.algos.DQNConfig
    config = config_class(
        batch_size=batch_per_rank,
        learning_rate=hyper["learning_rate"],
        gamma=hyper["gamma"],
        target_update_interval=hyper["target_update_interval"],
        encoder_factory=d3rlpy.models.VectorEncoderFactory(
            hidden_units=hyper["hidden_sizes"], activation=hyper["activation"]
        ),
        optim_factory=d3rlpy.optimizers.AdamFactory(
            eps=hyper["adam_eps"], clip_grad_norm=hyper["max_grad_norm"]
        ),
    )
    return config.create(device="cpu:0", enable_ddp=distributed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--steps", type=int, required=True, help="gradient steps")
    parser.add_argument("--warmup-steps", type=int, required=True, help="steps left out of the timing")
    parser.add_argument("--hyper", type=json.loads, required=True, help="hyperparameters as JSON")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as distrl's train.torch_threads=1
    distributed = "RANK" in os.environ
    rank = d3rlpy.distributed.init_process_group("gloo") if distributed else 0
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    global_batch = args.hyper["batch_size"]
    if global_batch % world_size:
        raise SystemExit(f"batch size {global_batch} does not split evenly over {world_size} ranks")
    d3rlpy.seed(args.hyper["seed"] + rank)  # each rank draws its own samples

    load_start = time.perf_counter()
    dataset = load_dataset(args.data)
    load_s = time.perf_counter() - load_start

    dqn = make_dqn(args.hyper, global_batch // world_size, distributed)
    marks: dict[int, float] = {}

    def mark_time(_algo: object, _epoch: int, step: int) -> None:
        if step in (args.warmup_steps, args.steps):
            marks[step] = time.perf_counter()

    dqn.fit(
        dataset,
        n_steps=args.steps,
        n_steps_per_epoch=args.steps,  # one epoch: nothing runs between epochs
        logger_adapter=d3rlpy.logging.NoopAdapterFactory(),
        show_progress=False,
        callback=mark_time,
    )
    train_s = marks[args.steps] - marks[args.warmup_steps]
    if rank == 0:
        result = {
            "load_s": load_s,
            "transitions": dataset.transition_count,
            "samples_per_s": (args.steps - args.warmup_steps) * global_batch / train_s,
        }
        args.out.write_text(json.dumps(result))
    if distributed:
        d3rlpy.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
