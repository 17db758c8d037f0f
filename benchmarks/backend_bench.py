"""CartPole-v1 throughput per env backend (gymnasium, envpool, torch): raw stepping and the whole loop.

Measured side by side in one run, ``--repeats`` times interleaved (the machine is noisy), medians
reported, every process on one CPU thread:

1. ``raw``: env steps per second of random actions (drawn beforehand, cycled) and nothing else,
   no policy, at 32 and 4096 envs, ``--seconds`` per measurement after a short warm-up. Each
   backend through distrl's VecEnv interface (``distrl.envs.make_vec_env``: torch tensors in and
   out, same-step auto-reset with the final observation) and, as the library's own ceiling, without
   it: Gymnasium's ``SyncVectorEnv`` (same-step auto-reset, numpy), EnvPool's own Gymnasium API
   (numpy, its next-step auto-reset, one thread) and distrl's bare ``TorchCartPole``. The gap
   between the two rows of a backend is what distrl's adapter costs (none for torch: the backend
   hands out the ``TorchCartPole`` itself, so its two rows differ by noise only). The torch envs
   run on ``--device``.
2. ``loop``: env steps per second of the whole training loop (collect + returns + update +
   logging + the configs' checkpoints), ``python -m distrl.train`` (torchrun for 2 ranks) with a
   fixed number of updates, no early stop (``train.stop_return=null``), ``OMP_NUM_THREADS=1`` and
   ``train.torch_threads=1``, TensorBoard off, for every backend (and the torch backend once more
   with ``train.compile=true``: ``torch+compile``, its compilation in the first update, from
   torch's on-disk cache after the first run) x config x {1, 2 ranks}:
   ``configs/cartpole_ppo.yaml`` as shipped (32 envs summed over the ranks: 2 ranks share the
   same global batch) and ``configs/cartpole_ppo_4096.yaml`` (4096 envs on every rank: 2 ranks
   collect twice the batch). Figures from rank 0's ``metrics.jsonl``: ``sps`` of the last row is
   the trainer's own figure, env steps summed over ranks / seconds since the training loop
   started; it excludes start-up (imports, process group, building the envs, the first reset)
   but includes the first update's one-off costs, so the table also gives the rate after the
   first update (from the rows' ``global_step`` and ``time_s``). Where the time goes: the
   ``time/*`` phases of every update after the first (averaged over ranks by the trainer), as
   shares of the update's whole pass (``time/update``); ``other`` is what no phase covers.

Usage: python benchmarks/backend_bench.py [--only raw loop] [--repeats 3] [--quick]
       [--seconds 2] [--device cpu] [--backends ...] [--ranks 1 2] [--large-updates N]
(``--backends``, ``--ranks``: a subset of the loop's contenders, gymnasium always among them;
``--large-updates``: that many updates at 4096 envs for all but gymnasium, e.g. Isaac Lab's 150.)
(``--quick``: one repeat, short raw measurements and a few updates per loop run, to check the code.)
The loop runs reuse ``cartpole_bench``'s commands and metrics reader.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import cycle
from pathlib import Path

import envpool
import gymnasium as gym
import numpy as np
import torch
from cartpole_bench import CONFIG as SHIPPED_CONFIG
from cartpole_bench import distrl_cmd, metrics_rows, timed
from gymnasium.vector import AutoresetMode, SyncVectorEnv
from rsl_rl_bench import cpu_model, table

from distrl.config.run import load_config
from distrl.config.sections import EnvConfig
from distrl.envs import make_vec_env
from distrl.envs.torch_envs import TorchCartPole
from distrl.timing import SHARED_PHASES

ENV_ID = "CartPole-v1"
BACKENDS = ("gymnasium", "envpool", "torch")
COMPILED = "+compile"
LOOP_BACKENDS = (*BACKENDS, "torch" + COMPILED)
"""The loop's contenders: every backend, and the torch backend again with ``train.compile=true``
(PPO's loss through ``torch.compile``; its one-time compilation falls in the first update)."""
RAW_NUM_ENVS = (32, 4096)
WARMUP_STEPS = 5
ACTION_BATCHES = 16
"""Random action batches drawn before timing and cycled, so drawing them is not timed."""

LARGE_CONFIG = SHIPPED_CONFIG.parent / "cartpole_ppo_4096.yaml"
RANKS = (1, 2)
LOOP_UPDATES = {SHIPPED_CONFIG: 200, LARGE_CONFIG: 24}
"""Updates per loop run: 200 x 512 env steps for the shipped config (~7 s of loop at 1 rank here);
24 x 65,536 per rank at 4096 envs (the gymnasium backend, ~40k env steps/s in the loop here, takes
~40 s of loop). Start-up is then a few percent of ``sps`` at most, and ``torch+compile``'s
compilation (2-10 s in its first update) is spread over a run a sixth as long as Isaac Lab's
150 updates, not hidden."""
QUICK_LOOP_UPDATES = {SHIPPED_CONFIG: 20, LARGE_CONFIG: 2}
QUICK_SECONDS = 0.3
MIN_PHASE_SHARE = 0.0005
"""Phases below this share of the update in every run are left out of the table (e.g. ``eval``
with the stop check off)."""


# ------------------------------------------------------------------------------------------ raw
@dataclass(frozen=True)
class Stepper:
    """One batch of envs ready to step: ``step`` advances every env once, ``finish`` waits for
    queued device work, ``close`` releases the envs."""

    step: Callable[[], object]
    finish: Callable[[], None]
    close: Callable[[], None]


def steps_per_second(stepper: Stepper, num_envs: int, seconds: float) -> float:
    """Step for about ``seconds`` after a warm-up; env steps per second."""
    for _ in range(WARMUP_STEPS):
        stepper.step()
    stepper.finish()
    calls = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        stepper.step()
        calls += 1
    stepper.finish()
    return calls * num_envs / (time.perf_counter() - start)


def torch_actions(num_envs: int, device: torch.device) -> Iterator[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 2, (num_envs,), generator=generator) for _ in range(ACTION_BATCHES)]
    return cycle([b.to(device) for b in batches])


def numpy_actions(num_envs: int) -> Iterator[np.ndarray]:
    rng = np.random.default_rng(0)
    return cycle([rng.integers(0, 2, size=num_envs) for _ in range(ACTION_BATCHES)])


def no_wait() -> None:
    pass


def device_wait(device: torch.device) -> Callable[[], None]:
    return torch.cuda.synchronize if device.type == "cuda" else no_wait


def distrl_vec_env(backend: str, num_envs: int, device: torch.device) -> Stepper:
    env = make_vec_env(EnvConfig(id=ENV_ID, backend=backend), range(num_envs), device)
    env.reset()
    actions = torch_actions(num_envs, env.device)
    return Stepper(lambda: env.step(next(actions)), device_wait(env.device), env.close)


def gymnasium_library(num_envs: int, device: torch.device) -> Stepper:
    env = SyncVectorEnv(
        [lambda: gym.make(ENV_ID) for _ in range(num_envs)], autoreset_mode=AutoresetMode.SAME_STEP
    )
    env.reset(seed=0)
    actions = numpy_actions(num_envs)
    return Stepper(lambda: env.step(next(actions)), no_wait, env.close)


def envpool_library(num_envs: int, device: torch.device) -> Stepper:
    env = envpool.make_gymnasium(ENV_ID, num_envs=num_envs, seed=0, num_threads=1)
    env.reset()
    actions = numpy_actions(num_envs)
    return Stepper(lambda: env.step(next(actions)), no_wait, env.close)


def torch_library(num_envs: int, device: torch.device) -> Stepper:
    env = TorchCartPole(num_envs, device=device)
    env.reset()
    actions = torch_actions(num_envs, device)
    return Stepper(lambda: env.step(next(actions)), device_wait(device), no_wait)


VECENV = "distrl VecEnv"
RAW_ROWS: dict[tuple[str, str], Callable[[int, torch.device], Stepper]] = {
    ("gymnasium", VECENV): lambda n, d: distrl_vec_env("gymnasium", n, d),
    ("gymnasium", "library: `SyncVectorEnv` (same-step reset)"): gymnasium_library,
    ("envpool", VECENV): lambda n, d: distrl_vec_env("envpool", n, d),
    ("envpool", "library: `envpool.make_gymnasium` (next-step reset)"): envpool_library,
    ("torch", VECENV): lambda n, d: distrl_vec_env("torch", n, d),
    ("torch", "library: bare `TorchCartPole`"): torch_library,
}
"""(backend, API) -> builder of ``num_envs`` envs on a device (host libraries ignore it)."""

RawKey = tuple[str, str, int]
"""(backend, API, number of envs)."""


def raw_throughput(repeats: int, seconds: float, device: torch.device) -> dict[RawKey, list[float]]:
    """Every row at every size once per repeat, interleaved; env steps/s per run."""
    results: dict[RawKey, list[float]] = {}
    for _ in range(repeats):
        for num_envs in RAW_NUM_ENVS:
            for (backend, api), build in RAW_ROWS.items():
                stepper = build(num_envs, device)
                results.setdefault((backend, api, num_envs), []).append(
                    steps_per_second(stepper, num_envs, seconds)
                )
                stepper.close()
    return results


def print_raw(results: dict[RawKey, list[float]], repeats: int, seconds: float, device: torch.device) -> None:
    print(
        f"\n## Raw env steps/s, random actions, one thread (torch envs on {device}), median of "
        f"{repeats} interleaved runs of ~{seconds:g} s\n"
    )
    median = {key: statistics.median(runs) for key, runs in results.items()}
    sizes = [f"{n} envs" for n in RAW_NUM_ENVS]
    ratios = [f"{n} envs vs gymnasium VecEnv" for n in RAW_NUM_ENVS]
    rows = []
    for backend, api in RAW_ROWS:
        rates = [f"{median[backend, api, n]:,.0f}" for n in RAW_NUM_ENVS]
        vs_gym = [f"{median[backend, api, n] / median['gymnasium', VECENV, n]:.1f}x" for n in RAW_NUM_ENVS]
        rows.append([backend, api, *rates, *vs_gym])
    table(["backend", "API", *sizes, *ratios], rows)
    print()
    for backend, api in RAW_ROWS:
        if api != VECENV:
            shares = " / ".join(
                f"{100 * median[backend, VECENV, n] / median[backend, api, n]:.0f}%" for n in RAW_NUM_ENVS
            )
            print(
                f"- {backend}: distrl's VecEnv runs at {shares} of the library's rate ({' / '.join(sizes)})"
            )


# ----------------------------------------------------------------------------------------- loop
@dataclass(frozen=True)
class LoopRun:
    sps: float
    """``sps`` of the last metrics row: env steps since the loop started / its seconds."""
    steady_sps: float
    """Env steps per second from the end of the first update to the end of the last."""
    wall_s: float
    """The whole process (torchrun's too for 2 ranks), start-up included."""
    update_s: float
    """Mean seconds of an update's whole pass after the first."""
    phase_shares: dict[str, float]
    """``time/<phase>`` / ``time/update``, mean over the updates after the first."""


LoopKey = tuple[Path, str, int]
"""(config, backend, ranks)."""


def steps_per_update(config: Path, ranks: int) -> int:
    """Env steps of one update summed over ranks (``num_envs`` is global, ``num_envs_per_rank`` not)."""
    cfg = load_config(config)
    env = cfg.env
    global_envs = env.num_envs if env.num_envs is not None else env.num_envs_per_rank * ranks
    return cfg.algo.rollout_steps * global_envs


def loop_run(run_dir: Path, config: Path, backend: str, ranks: int, updates: int, device: str) -> LoopRun:
    """``backend``: one of ``LOOP_BACKENDS``."""
    args = [
        "--total-steps", str(updates * steps_per_update(config, ranks)),
        f"env.backend={backend.removesuffix(COMPILED)}",
        f"train.compile={str(backend.endswith(COMPILED)).lower()}",
        "train.stop_return=null",
        f"train.device={device}",
        "train.torch_threads=1",
    ]  # fmt: skip
    wall_s = timed(distrl_cmd(ranks, run_dir, *args, config=config))
    rows = metrics_rows(run_dir)
    first, last = rows[0], rows[-1]
    steady = rows[1:] or rows
    steady_sps = (
        (last["global_step"] - first["global_step"]) / (last["time_s"] - first["time_s"])
        if len(rows) > 1
        else last["sps"]
    )
    update_s = statistics.mean(r["time/update"] for r in steady)
    phases = {k.removeprefix("time/") for r in steady for k in r if k.startswith("time/")} - {"update"}
    shares = {p: statistics.mean(r.get(f"time/{p}", 0.0) / r["time/update"] for r in steady) for p in phases}
    return LoopRun(last["sps"], steady_sps, wall_s, update_s, shares)


@dataclass(frozen=True)
class LoopPlan:
    """What the loop part runs: ``backends`` (``LOOP_BACKENDS``, gymnasium always: the baseline)
    x the configs of ``updates`` x ``ranks``."""

    backends: tuple[str, ...]
    ranks: tuple[int, ...]
    updates: dict[Path, int]
    """Updates per run, by config."""
    large_updates: int | None = None
    """Instead, at ``LARGE_CONFIG``, for every backend but gymnasium's (whose rate is the same
    from its first update: nothing to compile)."""

    def budget(self, config: Path, backend: str) -> int:
        if config == LARGE_CONFIG and backend != "gymnasium" and self.large_updates:
            return self.large_updates
        return self.updates[config]


def loop_throughput(tmp: Path, repeats: int, plan: LoopPlan, device: str) -> dict[LoopKey, list[LoopRun]]:
    """Every backend x config x ranks once per repeat, the backends innermost (compared closest in time)."""
    results: dict[LoopKey, list[LoopRun]] = {}
    for _ in range(repeats):
        for config in plan.updates:
            for ranks in plan.ranks:
                for backend in plan.backends:
                    run_dir = tmp / f"{config.stem}-{backend}-{ranks}"
                    count = plan.budget(config, backend)
                    run = loop_run(run_dir, config, backend, ranks, count, device)
                    results.setdefault((config, backend, ranks), []).append(run)
    return results


def median_run(runs: list[LoopRun]) -> LoopRun:
    """Each figure's median over the repeats (phases missing from a run count as 0)."""
    phases = {p for r in runs for p in r.phase_shares}
    return LoopRun(
        sps=statistics.median(r.sps for r in runs),
        steady_sps=statistics.median(r.steady_sps for r in runs),
        wall_s=statistics.median(r.wall_s for r in runs),
        update_s=statistics.median(r.update_s for r in runs),
        phase_shares={p: statistics.median(r.phase_shares.get(p, 0.0) for r in runs) for p in phases},
    )


def config_label(config: Path) -> str:
    env = load_config(config).env
    if env.num_envs is not None:
        return f"`{config.name}` ({env.num_envs} envs in all)"
    return f"`{config.name}` ({env.num_envs_per_rank} envs per rank)"


def print_loop(results: dict[LoopKey, list[LoopRun]], repeats: int, plan: LoopPlan) -> None:
    runs = {key: median_run(r) for key, r in results.items()}
    updates = plan.updates
    budgets = "; ".join(
        f"`{c.name}`: {n} updates, {n * steps_per_update(c, 1):,} env steps per rank"
        for c, n in updates.items()
    )
    if plan.large_updates:
        budgets += f" ({plan.large_updates} updates at `{LARGE_CONFIG.name}` for all but gymnasium)"
    print(
        f"\n## Whole training loop, env steps/s, median of {repeats} interleaved runs\n\n"
        f"{budgets}; no early stop, one torch thread per process, TensorBoard off. env steps/s: the "
        "trainer's `sps` (last metrics row: since the training loop started, start-up excluded, "
        "first update included); after update 1: from the end of the first update to the end of "
        "the last. Wall: the whole process, start-up included.\n"
    )
    rows = []
    for config in updates:
        for backend in plan.backends:
            for ranks in plan.ranks:
                run = runs[config, backend, ranks]
                gym_run = runs[config, "gymnasium", ranks]
                single = runs.get((config, backend, 1))
                scaling = f"{run.sps / single.sps:.2f}x" if ranks > 1 and single else ""
                rows.append([
                    config_label(config), backend, str(ranks), f"{run.sps:,.0f}", f"{run.steady_sps:,.0f}",
                    f"{run.sps / gym_run.sps:.2f}x", scaling, f"{run.wall_s:.1f}",
                ])  # fmt: skip
    table(
        ["config", "backend", "ranks", "env steps/s", "after update 1", "vs gymnasium backend",
         "2 ranks / 1 rank", "wall s"],
        rows,
    )  # fmt: skip
    print()
    if LARGE_CONFIG in updates and SHIPPED_CONFIG in updates:
        for backend in (b for b in plan.backends if b.startswith("torch")):
            for ranks in plan.ranks:
                ratio = runs[LARGE_CONFIG, backend, ranks].sps / runs[SHIPPED_CONFIG, "gymnasium", ranks].sps
                print(
                    f"- {ranks} rank{'s' if ranks > 1 else ''}: {backend} backend at "
                    f"{config_label(LARGE_CONFIG)} / gymnasium backend at {config_label(SHIPPED_CONFIG)}: "
                    f"**{ratio:.1f}x**"
                )
    for config in updates:
        print_phases(config, {key: run for key, run in runs.items() if key[0] == config})


def print_phases(config: Path, runs: dict[LoopKey, LoopRun]) -> None:
    present = {
        p for run in runs.values() for p, share in run.phase_shares.items() if share >= MIN_PHASE_SHARE
    }
    own = sorted(present - {*SHARED_PHASES, "other"})  # the algorithm's own phases
    phases = [p for p in (*SHARED_PHASES, *own, "other") if p in present]
    print(
        f"\n### Where an update's time goes, {config_label(config)}: share of the update's whole "
        "pass (updates after the first, phases averaged over ranks, medians)\n"
    )
    rows = [
        [
            backend,
            str(ranks),
            f"{run.update_s:.3f}",
            *(f"{100 * run.phase_shares.get(p, 0.0):.1f}%" for p in phases),
        ]
        for (_, backend, ranks), run in runs.items()
    ]
    table(["backend", "ranks", "s per update", *phases], rows)


# ----------------------------------------------------------------------------------------- main
PARTS = ("raw", "loop")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=PARTS, default=list(PARTS), help="parts to run")
    parser.add_argument("--repeats", type=int, default=3, help="interleaved repeats of every measurement")
    parser.add_argument("--seconds", type=float, default=2.0, help="seconds per raw measurement")
    parser.add_argument("--device", default="cpu", help="torch envs (raw) and train.device (loop)")
    parser.add_argument("--quick", action="store_true", help="one repeat, tiny budgets: checks the code")
    parser.add_argument(
        "--backends", nargs="+", choices=LOOP_BACKENDS, default=list(LOOP_BACKENDS), help="loop contenders"
    )
    parser.add_argument("--ranks", nargs="+", type=int, choices=RANKS, default=list(RANKS), help="loop ranks")
    parser.add_argument(
        "--large-updates", type=int, help="loop updates at 4096 envs for all but gymnasium (default 24)"
    )
    args = parser.parse_args()
    repeats, seconds = (1, QUICK_SECONDS) if args.quick else (args.repeats, args.seconds)
    updates = QUICK_LOOP_UPDATES if args.quick else LOOP_UPDATES
    backends = tuple(dict.fromkeys(["gymnasium", *args.backends]))  # the baseline first, once each
    plan = LoopPlan(backends, tuple(args.ranks), updates, None if args.quick else args.large_updates)
    torch.set_num_threads(1)
    # EnvPool builds float32 Boxes from float64 bounds, and Gymnasium warns about it on every access.
    warnings.filterwarnings("ignore", message=".*precision lowered by casting to float32")
    print(
        f"Machine: {os.cpu_count()} cores ({cpu_model()}), Python {platform.python_version()}, torch "
        f"{torch.__version__}, gymnasium {gym.__version__}, envpool {envpool.__version__}"
        f"{' (--quick: checks the code, not the figures)' if args.quick else ''}"
    )
    if "raw" in args.only:
        device = torch.device(args.device)
        print_raw(raw_throughput(repeats, seconds, device), repeats, seconds, device)
    if "loop" in args.only:
        with tempfile.TemporaryDirectory() as tmp:
            results = loop_throughput(Path(tmp), repeats, plan, args.device)
        print_loop(results, repeats, plan)


if __name__ == "__main__":
    main()
