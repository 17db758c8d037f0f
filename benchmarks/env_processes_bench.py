"""Envs that step in processes of their own, their actions computed in one batched forward pass
(``env.backend: gymnasium_async``), against envs stepped where the policy acts: training env
steps per second on a fixed budget, for an env whose steps cost CPU time
(``examples/costly_cartpole.py``, ``--work-us`` per step).

Contenders, on PPO's and APPO's CartPole configs with 8 envs and 64 steps a rollout (the configs'
512 samples an update):
  * in the rank: the rank steps its 8 envs, then learns (``gymnasium``);
  * in 8 processes: each env in a process of its own, the rank acting for all 8 at once;
  * 2 collector processes: each steps 4 envs and acts for them itself (a forward pass each), at
    lag 0, the same training as the rank alone;
  * APPO, a policy process and 8 env processes: one collector process, one update ahead, acting
    for all 8 envs in one forward pass while they step in processes of their own (Sample
    Factory's rollout and policy workers);
  * APPO, 2 collector processes: each steps 4 envs and acts for them, one update ahead.
Each contender runs ``--repeats`` times, interleaved; medians reported; speed is the training
loop's own (start-up excluded). Run from the repository root (``examples`` must import).

Usage: python benchmarks/env_processes_bench.py [--steps 32768] [--work-us 500] [--repeats 3]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from collector_processes_bench import APPO, CONFIG, mean_age, print_speeds, train

ASYNC = "env.backend=gymnasium_async"
CONTENDERS = {
    "PPO, envs in the rank": (CONFIG, []),
    "PPO, envs in 8 processes, actions in the rank": (CONFIG, [ASYNC]),
    "PPO, 2 collector processes acting for 4 envs each, lag 0": (CONFIG, ["collect.processes=2"]),
    "APPO, a policy process acting for 8 env processes, lag 1": (APPO, [ASYNC]),
    "APPO, 2 collector processes acting for 4 envs each, lag 1": (APPO, ["collect.processes=2"]),
}
"""Name: (config, overrides). APPO's config has one collector process one update ahead."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=32_768)
    parser.add_argument("--work-us", type=float, default=500.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    common = [
        f"train.total_steps={args.steps}", "train.stop_return=null", "env.num_envs=8",
        "--env", "examples.costly_cartpole:CostlyCartPole", f"env.kwargs.work_us={args.work_us}",
        "env.max_episode_steps=500", "algo.rollout_steps=64",
    ]  # fmt: skip
    speeds: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    ages: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for name, (config, overrides) in CONTENDERS.items():
                steps, seconds, rows = train(Path(tmp) / f"{repeat}", 1, [*common, *overrides], config)
                speeds[name].append(steps / seconds)
                ages[name] = mean_age(rows)
                print(f"{name}: {steps / seconds:,.0f} env steps/s", flush=True)
    heading = (
        f"Envs in processes of their own, {args.work_us:g} us of work a step, {args.steps:,} env steps, "
        f"medians of {args.repeats} interleaved runs"
    )
    print_speeds(speeds, ages, "PPO, envs in the rank", heading)


if __name__ == "__main__":
    main()
