"""Atari PPO against CleanRL: whole-loop agent steps per second of distrl and of CleanRL's own
``ppo_atari_envpool.py`` (its PyPI package, cleanrl==1.2.0, in its own venv), both on EnvPool's
C++ Atari Pong-v5, at CleanRL's Atari settings: 8 envs x 128 steps, 4 minibatches x 4 epochs, the
Nature CNN on 4 stacked 84x84 grey frames, lr 2.5e-4 annealed, clip 0.1, seed 1, CPU, one torch
thread per process (OMP_NUM_THREADS=1), TensorBoard scalars every update. Interleaved repeats
(distrl, CleanRL, distrl, ...), medians.

    python benchmarks/atari_peer_bench.py [--repeats 3] [--updates 6] [--procs 1 2] [--ale] [--fp32]

The rate is steady state for both: agent steps over seconds from the end of the first update to
the end of the last (start-up and the first update left out). distrl: its metrics.jsonl rows
(``global_step``, ``time_s``); CleanRL: the wall time of its ``charts/SPS`` TensorBoard scalar,
written at the end of every update (its printed ``SPS`` is a running average from the start).

The env stack. Both ask EnvPool for the same task and options (frame skip 4 with a max over the
last two frames, 84x84 grey, 4 frames stacked, up to 30 no-ops and FIRE at reset, episodic life,
rewards clipped by EnvPool, no sticky actions, 27,000 steps a game) on the same number of EnvPool
threads (EnvPool's default for CleanRL, min(8 envs, cores); distrl gets the same number split over
its ranks). What differs:
  * EnvPool's version: CleanRL's script needs the gym 0.23 API (``reset()`` -> obs, 4-tuple
    ``step``), which EnvPool >= 1.0 no longer gives (its ``env_type="gym"`` is Gymnasium's API), and
    CleanRL's pin (envpool<0.7) has no Python 3.11 wheel: its venv has envpool 0.8.4 + gym 0.23.1.
    distrl uses the project's venv, envpool 1.2.5 (``env.backend: envpool``). Same C++ env code,
    same ROM (both wheels ship the ROMs; nothing downloads);
  * auto-reset: EnvPool's own for CleanRL (an ended env resets on its next step, that step's action
    ignored but counted), distrl resets ended envs within the same step (one ``reset`` call more per
    game end; Pong games are thousands of steps);
  * the trainers (what is measured): e.g. CleanRL stores observations as float32, distrl as uint8.
``--ale`` adds distrl's shipped config (configs/atari_pong_ppo.yaml: ale-py 0.12's
``AtariVectorEnv``, one thread a rank) for reference.

No CleanRL row for 2 processes: its multi-process script (``ppo_atari_multigpu.py``, torchrun on
gloo) and ``ppo_atari.py`` use gym 0.23 + SB3 1.2.0's Python wrappers over ale-py 0.7, whose wheels
stop at Python 3.10. ale-py 0.8.1 (ROMs imported with ``ale-import-roms`` from ale-py 0.12.1's
wheel) fails in SB3's NoopResetEnv ("'numpy.random._generator.Generator' object has no attribute
'randint'") and returns gym 0.26's 5-tuple from ``step``. ``--procs 2`` times distrl's 2 ranks
(torchrun, ``--distributed``; the 8 envs and the 1,024-sample batch split over the ranks, as
CleanRL's multi-process script would split them) alone.

CleanRL's venv (benchmarks/.cleanrl-atari-venv) is built on first use: torch==2.13.0 first (the CPU
wheel on local disk), cleanrl==1.2.0 without its pins (it declares Python < 3.11), then
gym==0.23.1, envpool==0.8.4, tensorboard and numpy<2.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cartpole_bench import (  # noqa: E402
    CLEANRL_RELEASE,
    CommandFailed,
    distrl_cmd,
    ensure_venv,
    metrics_rows,
    run_timed,
)

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "configs" / "atari_pong_ppo.yaml"
PEER_VENV = REPO / "benchmarks" / ".cleanrl-atari-venv"
PEER_ENVPOOL = "envpool==0.8.4"
ENV_ID = "Pong-v5"
NUM_ENVS = 8
STEPS_PER_UPDATE = NUM_ENVS * 128
SEED = 1
PEER = "CleanRL `ppo_atari_envpool.py`"
DISTRL = "distrl, `env.backend=envpool`"
DISTRL_FP32 = "distrl, `env.backend=envpool`, `train.mixed_precision=fp32`"
DISTRL_ALE = "distrl, shipped config (`env.backend=ale`)"
DISTRL_RUNS = {
    DISTRL: ("envpool", []),
    DISTRL_FP32: ("envpool", ["train.mixed_precision=fp32"]),
    DISTRL_ALE: ("ale", []),
}
"""distrl's contenders: (env backend, overrides). The default precision is ``auto``: bf16 autocast of
the CNN where the CPU computes bf16 natively (CleanRL runs float32 throughout)."""
COMMON = [
    "log.progress=false",
    "log.tensorboard=true",  # CleanRL writes TensorBoard scalars every update too
    "train.device=cpu",
    "checkpoint.interval_steps=1000000000",
]
"""Overrides of configs/atari_pong_ppo.yaml for every distrl run."""

PEER_SCALARS = """
import glob, json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(glob.glob(sys.argv[1] + "/runs/*")[0], size_guidance={"scalars": 0})
acc.Reload()
print(json.dumps([[e.step, e.wall_time] for e in acc.Scalars("charts/SPS")]))
"""
"""(global step, wall time) of every ``charts/SPS`` scalar of the CleanRL run in ``argv[1]``."""


def ensure_peer() -> Path:
    """CleanRL 1.2.0 without its pins, then what ``ppo_atari_envpool.py`` imports."""
    return ensure_venv(
        PEER_VENV,
        ["--no-deps", "--ignore-requires-python", CLEANRL_RELEASE],
        ["gym==0.23.1", PEER_ENVPOOL, "tensorboard>=2.10,<3", "numpy<2"],
    )


def steady_rate(points: list[tuple[int, float]]) -> float:
    """Agent steps per second from the first (step, time) point to the last."""
    (first_step, first_s), (last_step, last_s) = points[0], points[-1]
    return (last_step - first_step) / (last_s - first_s)


def distrl_rate(procs: int, updates: int, out: Path, backend: str, overrides: list[str]) -> float:
    args = ["--total-steps", str(STEPS_PER_UPDATE * updates), "--seed", str(SEED), *COMMON, *overrides]
    if backend == "envpool":
        threads = max(1, min(NUM_ENVS, os.cpu_count() or 1) // procs)
        kwargs = f"{{episodic_life: true, reward_clip: true, num_threads: {threads}}}"
        args += ["env.backend=envpool", f"env.id={ENV_ID}", f"env.kwargs={kwargs}"]
    run_timed(distrl_cmd(procs, out, *args, config=CONFIG), REPO)
    return steady_rate([(row["global_step"], row["time_s"]) for row in metrics_rows(out)])


def peer_rate(python: Path, updates: int, out: Path) -> float:
    out.mkdir(parents=True)
    run_timed(
        [str(python), "-m", "cleanrl.ppo_atari_envpool", "--env-id", ENV_ID, "--seed", str(SEED),
         "--total-timesteps", str(STEPS_PER_UPDATE * updates), "--num-envs", str(NUM_ENVS),
         "--num-steps", "128", "--num-minibatches", "4", "--update-epochs", "4",
         "--cuda", "False", "--track", "False", "--capture-video", "False"],
        out,
    )  # fmt: skip
    _, stdout = run_timed([str(python), "-c", PEER_SCALARS, str(out)])
    return steady_rate([(step, wall_s) for step, wall_s in json.loads(stdout)])


def measure(args: argparse.Namespace, peer: Path, tmp: Path) -> dict[tuple[str, int], list[float]]:
    """(contender, processes) -> steady agent steps/s of each repeat, interleaved."""
    names = [DISTRL, PEER, *([DISTRL_FP32] if args.fp32 else []), *([DISTRL_ALE] if args.ale else [])]
    rates: dict[tuple[str, int], list[float]] = {}
    for repeat in range(args.repeats):
        for procs in args.procs:
            for i, name in enumerate(names):
                if name == PEER and procs != 1:
                    continue  # no CleanRL run on 2 processes here (see the docstring)
                out = tmp / f"{repeat}-{procs}-{i}"
                if name == PEER:
                    rate = peer_rate(peer, args.updates, out)
                else:
                    rate = distrl_rate(procs, args.updates, out, *DISTRL_RUNS[name])
                rates.setdefault((name, procs), []).append(rate)
    return rates


def print_table(rates: dict[tuple[str, int], list[float]], args: argparse.Namespace) -> None:
    print(
        f"machine: {os.cpu_count()} cores; {args.repeats} interleaved repeats of {args.updates} updates "
        f"({STEPS_PER_UPDATE:,} agent steps each), steady state (first update left out)\n"
    )
    print("| contender | processes | median agent steps/s | per repeat | distrl / CleanRL, same processes |")
    print("| --- | --- | --- | --- | --- |")
    medians = {key: statistics.median(runs) for key, runs in rates.items()}
    for (name, procs), runs in rates.items():
        peer = medians.get((PEER, procs))
        ratio = f"{medians[name, procs] / peer:.2f}x" if peer is not None and name != PEER else "–"
        each = " / ".join(f"{r:.0f}" for r in runs)
        print(f"| {name} | {procs} | {medians[name, procs]:.0f} | {each} | {ratio} |")
    if 2 in args.procs:
        print(
            "\nNo CleanRL row for 2 processes: ppo_atari_multigpu.py needs ale-py 0.7 (gym 0.23 API), "
            "which has no Python 3.11 wheel (see this script's docstring)."
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--updates", type=int, default=6, help=f"updates of {STEPS_PER_UPDATE:,} agent steps per run (>= 2)"
    )
    parser.add_argument("--procs", type=int, nargs="+", choices=[1, 2], default=[1])
    parser.add_argument("--ale", action="store_true", help="also time distrl's shipped config (ale-py)")
    parser.add_argument("--fp32", action="store_true", help="also time distrl in float32, as CleanRL runs")
    args = parser.parse_args()
    if args.updates < 2:
        parser.error("--updates must be at least 2: the first update is left out of the rate")
    peer = ensure_peer()
    with tempfile.TemporaryDirectory(prefix="atari-peer-bench-") as tmp:
        try:
            rates = measure(args, peer, Path(tmp))
        except CommandFailed as exc:
            sys.exit(str(exc))
    print_table(rates, args)


if __name__ == "__main__":
    main()
