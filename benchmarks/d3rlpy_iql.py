"""d3rlpy's IQL on a distrl continuous-action Parquet dataset: the contender in ``iql_bench.py``.

Runs with the Python of d3rlpy's own virtual environment (d3rlpy 2.8.1 pins gymnasium 1.0.0), so
it imports neither distrl nor anything of the main environment. Loads the whole dataset into a
``d3rlpy.dataset.MDPDataset`` (rows sorted into episodes by ``mdp_id`` and ``sequence_number``;
an episode that was cut by the time limit ends in a timeout), trains ``--steps`` gradient steps
with the hyperparameters ``iql_bench.py`` read from distrl's config (actions scaled from the
env's bounds into [-1, 1], as distrl does), and writes a JSON object to ``--out``: the load time,
training samples per second after ``--warmup-steps`` steps, and the mean return of
``--eval-episodes`` deterministic episodes on seeds ``--eval-seed`` onwards.

Usage: python d3rlpy_iql.py --data DIR --steps N --warmup-steps W --hyper JSON --out FILE
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import d3rlpy
import numpy as np
import torch
from d3rlpy_common import greedy_return, load_episodes


def make_iql(hyper: dict[str, Any], low: list[float], high: list[float]) -> d3rlpy.algos.IQL:
    encoder = d3rlpy.models.VectorEncoderFactory(
        hidden_units=hyper["hidden_sizes"], activation=hyper["activation"]
    )
    adam = d3rlpy.optimizers.AdamFactory(eps=hyper["adam_eps"])
    return d3rlpy.algos.IQLConfig(
        batch_size=hyper["batch_size"],
        actor_learning_rate=hyper["learning_rate"],
        critic_learning_rate=hyper["learning_rate"],
        actor_optim_factory=adam,
        critic_optim_factory=adam,
        actor_encoder_factory=encoder,
        critic_encoder_factory=encoder,
        value_encoder_factory=encoder,
        gamma=hyper["gamma"],
        tau=hyper["tau"],
        n_critics=2,
        expectile=hyper["expectile"],
        weight_temp=hyper["temperature"],
        max_weight=hyper["max_weight"],
        action_scaler=d3rlpy.preprocessing.MinMaxActionScaler(minimum=np.array(low), maximum=np.array(high)),
    ).create(device="cpu:0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--steps", type=int, required=True, help="gradient steps")
    parser.add_argument("--warmup-steps", type=int, required=True, help="steps left out of the timing")
    parser.add_argument("--hyper", type=json.loads, required=True, help="hyperparameters as JSON")
    parser.add_argument("--eval-episodes", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)  # as distrl's train.torch_threads=1
    hyper = args.hyper
    d3rlpy.seed(hyper["seed"])
    load_start = time.perf_counter()
    dataset = load_episodes(args.data, discrete=False)
    load_s = time.perf_counter() - load_start
    iql = make_iql(hyper, hyper["action_low"], hyper["action_high"])
    marks: dict[int, float] = {}

    def mark_time(_algo: object, _epoch: int, step: int) -> None:
        if step in (args.warmup_steps, args.steps):
            marks[step] = time.perf_counter()

    iql.fit(
        dataset,
        n_steps=args.steps,
        n_steps_per_epoch=args.steps,  # one epoch: nothing runs between epochs
        logger_adapter=d3rlpy.logging.NoopAdapterFactory(),
        show_progress=False,
        callback=mark_time,
    )
    result = {
        "load_s": load_s,
        "transitions": dataset.transition_count,
        "samples_per_s": (args.steps - args.warmup_steps)
        * hyper["batch_size"]
        / (marks[args.steps] - marks[args.warmup_steps]),
    }
    if args.eval_episodes:
        result["eval_return"] = greedy_return(iql, hyper["env_id"], args.eval_episodes, hyper["eval_seed"])
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
