"""d3rlpy's IQL on a distrl continuous-action Parquet dataset: the contender in ``iql_bench.py``.

Runs with the Python of d3rlpy's own virtual environment (d3rlpy 2.8.1 pins gymnasium 1.0.0), so
it imports neither distrl nor anything of the main environment. Loads the whole dataset into a
``d3rlpy.dataset.MDPDataset`` (rows sorted into episodes by ``mdp_id`` and ``sequence_number``;
an episode that was cut by the time limit ends in a timeout), trains ``--steps`` gradient steps
with the hyperparameters ``iql_bench.py`` read from distrl's config (actions scaled from the
env's bounds into [-1, 1], as distrl does), and writes a JSON object to ``--out``: the load time,
training samples per second after ``--warmup-steps`` steps, and the mean return of
``--eval-episodes`` deterministic episodes on seeds ``--eval-seed`` onwards. With
``--trace-every K`` it also records, every K steps, the statistics distrl's IQL logs (the means
of V, the advantage, its batch maximum, the policy's weight and the share clipped, over the
interval's training batches) and a greedy check on distrl's stop-check seeds; the timing is
then not comparable.

Usage: python d3rlpy_iql.py --data DIR --steps N --warmup-steps W --hyper JSON --out FILE [--trace-every K]
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


def make_iql(hyper: dict[str, Any], steps: int) -> d3rlpy.algos.IQL:
    encoder = d3rlpy.models.VectorEncoderFactory(
        hidden_units=hyper["hidden_sizes"], activation=hyper["activation"]
    )
    adam = d3rlpy.optimizers.AdamFactory(eps=hyper["adam_eps"])
    # distrl's algo.actor_cosine_decay: the actor's learning rate to zero over the run, per step
    cosine = d3rlpy.optimizers.CosineAnnealingLRFactory(T_max=steps) if hyper["actor_cosine_decay"] else None
    actor_adam = d3rlpy.optimizers.AdamFactory(eps=hyper["adam_eps"], lr_scheduler_factory=cosine)
    return d3rlpy.algos.IQLConfig(
        batch_size=hyper["batch_size"],
        actor_learning_rate=hyper["learning_rate"],
        critic_learning_rate=hyper["learning_rate"],
        actor_optim_factory=actor_adam,
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
        action_scaler=d3rlpy.preprocessing.MinMaxActionScaler(
            minimum=np.array(hyper["action_low"]), maximum=np.array(hyper["action_high"])
        ),
    ).create(device="cpu:0")


class WeightTrace:
    """Records what distrl's IQL logs each update, from d3rlpy's own weight computation: the
    advantage min Q_target(s, a) - V(s) of each training batch, recomputed beside it."""

    def __init__(self, iql: d3rlpy.algos.IQL, temperature: float, max_weight: float) -> None:
        impl = iql.impl
        compute_weight = impl._compute_weight
        self.sums: dict[str, float] = {}
        self.updates = 0

        def traced(batch: Any) -> torch.Tensor:
            q = impl._targ_q_func_forwarder.compute_expected_q(batch.observations, batch.actions, "min")
            value = impl._modules.value_func(batch.observations)
            advantage = q - value
            unclipped = (temperature * advantage).exp()
            for key, statistic in (
                ("v_mean", value.mean()),
                ("advantage_mean", advantage.mean()), ("advantage_max", advantage.max()),
                ("policy_weight", unclipped.clamp(max=max_weight).mean()),
                ("policy_weight_clipped", (unclipped > max_weight).float().mean()),
            ):  # fmt: skip
                self.sums[key] = self.sums.get(key, 0.0) + float(statistic)
            self.updates += 1
            return compute_weight(batch)

        impl._compute_weight = traced

    def interval_means(self) -> dict[str, float]:
        means = {key: total / self.updates for key, total in self.sums.items()}
        self.sums, self.updates = {}, 0
        return means


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--steps", type=int, required=True, help="gradient steps")
    parser.add_argument("--warmup-steps", type=int, required=True, help="steps left out of the timing")
    parser.add_argument("--hyper", type=json.loads, required=True, help="hyperparameters as JSON")
    parser.add_argument("--eval-episodes", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--trace-every", type=int, default=0, help="steps between trace points; 0: none")
    args = parser.parse_args()
    torch.set_num_threads(1)  # as distrl's train.torch_threads=1
    hyper = args.hyper
    d3rlpy.seed(hyper["seed"])
    load_start = time.perf_counter()
    dataset = load_episodes(args.data, discrete=False)
    load_s = time.perf_counter() - load_start
    iql = make_iql(hyper, args.steps)
    marks: dict[int, float] = {}
    trace: list[dict[str, float]] = []
    if args.trace_every:
        iql.build_with_dataset(dataset)
        weights = WeightTrace(iql, hyper["temperature"], hyper["max_weight"])

    def mark_time(_algo: object, _epoch: int, step: int) -> None:
        if step in (args.warmup_steps, args.steps):
            marks[step] = time.perf_counter()
        if args.trace_every and step % args.trace_every == 0:
            check = greedy_return(iql, hyper["env_id"], hyper["check_episodes"], hyper["check_seed"])
            trace.append({"step": step, "check_return": check, **weights.interval_means()})

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
    if trace:
        result["trace"] = trace
    args.out.write_text(json.dumps(result))


if __name__ == "__main__":
    main()
