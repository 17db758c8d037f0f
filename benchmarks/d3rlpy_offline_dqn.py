"""d3rlpy's (double) DQN or DiscreteCQL on a distrl Parquet dataset: the contender in
``offline_bench.py`` (speed) and ``offline_dqn_seeds_bench.py`` (returns over seeds).

Runs with the Python of d3rlpy's own virtual environment (d3rlpy 2.8.1 pins gymnasium 1.0.0), so
it imports neither distrl nor anything of the main environment. Loads the whole dataset into a
``d3rlpy.dataset.MDPDataset`` (d3rlpy's design: every transition in memory on every process),
trains for ``--steps`` gradient steps with the hyperparameters ``offline_bench.py`` read from
distrl's config and, on rank 0, writes a JSON object to ``--out``: the load time, and training
samples per second after the first ``--warmup-steps`` steps.

With ``--eval-episodes``, it also plays the greedy policy on ``--env`` (episode i seeded
``--eval-seed`` + i) at the end, and with ``--stop-return`` every ``--check-every`` steps on
``--check-seed``'s episodes, stopping once their mean reaches it: distrl's stop rule.

Under torchrun each rank loads the whole dataset, samples its own share of every global batch
from it and averages gradients with d3rlpy's DDP (gloo).

Usage: python d3rlpy_offline_dqn.py --data DIR --steps N --warmup-steps W --hyper JSON --out FILE
    [--algo dqn|cql] [--eval-episodes N --eval-seed S --env ID] [--stop-return R --check-every K
    --check-seed S]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import d3rlpy
import torch
from d3rlpy_common import greedy_return, load_episodes


def make_dqn(
    hyper: dict[str, Any], batch_per_rank: int, distributed: bool, algo: str
) -> d3rlpy.algos.DQN | d3rlpy.algos.DiscreteCQL:
    """``algo`` dqn: (double) DQN; cql: DiscreteCQL (double DQN plus alpha x the conservative
    term logsumexp Q(s, .) - Q(s, a), distrl's ``algo.cql_alpha``)."""
    if algo == "cql":
        config_class, extra = d3rlpy.algos.DiscreteCQLConfig, {"alpha": hyper["cql_alpha"]}
    else:
        config_class = d3rlpy.algos.DoubleDQNConfig if hyper["double_q"] else d3rlpy.algos.DQNConfig
        extra = {}
    config = config_class(
        **extra,
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


class StopTraining(Exception):
    """Raised by the stop check to end ``fit`` (d3rlpy has no stop hook)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--steps", type=int, required=True, help="gradient steps")
    parser.add_argument("--warmup-steps", type=int, required=True, help="steps left out of the timing")
    parser.add_argument("--hyper", type=json.loads, required=True, help="hyperparameters as JSON")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--algo", choices=["dqn", "cql"], default="dqn")
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--eval-episodes", type=int, default=0)
    parser.add_argument("--eval-seed", type=int, default=0)
    parser.add_argument("--stop-return", type=float, default=None)
    parser.add_argument("--check-every", type=int, default=1000)
    parser.add_argument("--check-seed", type=int, default=0)
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
    dataset = load_episodes(args.data, discrete=True)
    load_s = time.perf_counter() - load_start

    dqn = make_dqn(args.hyper, global_batch // world_size, distributed, args.algo)
    marks: dict[int, float] = {}
    steps_done = args.steps

    def mark_time_and_check(algo: Any, _epoch: int, step: int) -> None:
        nonlocal steps_done
        if step in (args.warmup_steps, args.steps):
            marks[step] = time.perf_counter()
        checked = args.stop_return is not None and step % args.check_every == 0
        if checked and greedy_return(algo, args.env, args.eval_episodes, args.check_seed) >= args.stop_return:
            steps_done = step
            raise StopTraining

    with contextlib.suppress(StopTraining):
        dqn.fit(
            dataset,
            n_steps=args.steps,
            n_steps_per_epoch=args.steps,  # one epoch: nothing runs between epochs
            logger_adapter=d3rlpy.logging.NoopAdapterFactory(),
            show_progress=False,
            callback=mark_time_and_check,
        )
    if rank == 0:
        result: dict[str, Any] = {
            "load_s": load_s,
            "transitions": dataset.transition_count,
            "gradient_steps": steps_done,
        }
        if args.steps in marks:
            train_s = marks[args.steps] - marks[args.warmup_steps]
            result["samples_per_s"] = (args.steps - args.warmup_steps) * global_batch / train_s
        if args.eval_episodes:
            result["eval_return"] = greedy_return(dqn, args.env, args.eval_episodes, args.eval_seed)
        args.out.write_text(json.dumps(result))
    if distributed:
        d3rlpy.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
