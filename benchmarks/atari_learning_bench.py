"""Pong learning curves, distrl against CleanRL's Atari PPO: the game score over the first 1M agent
steps (4M frames), 3 seeds a side, both on EnvPool's C++ Pong-v5 at CleanRL's Atari settings (the
env stack and settings of benchmarks/atari_peer_bench.py: 8 envs x 128 steps, 4 minibatches x 4
epochs, Nature CNN on 4 stacked 84x84 grey frames, lr 2.5e-4 annealed, clip 0.1, entropy 0.01).

    python benchmarks/atari_learning_bench.py run --side distrl [--seeds 1 2 3] [--jobs 3]
    python benchmarks/atari_learning_bench.py run --side cleanrl [--seeds 1 2 3] [--jobs 3]
    python benchmarks/atari_learning_bench.py report

A side's seeds take hours of this machine (about 40 minutes a seed for distrl and 80 for CleanRL
on one core), so each side is its own command, and a finished run's curve is kept in
benchmarks/results/atari_pong/<side>_s<seed>/ (metrics.jsonl and config.yaml, a run dir that
``distrl plot`` reads); ``report`` draws both sides' curves with ``distrl plot`` and prints the
table. ``--jobs`` runs seeds side by side, one torch thread and one EnvPool thread each: only wall
time depends on it, not what is learned.

The score is the same statistic on both sides: after every update (1,024 agent steps), the mean
raw game score of the last 20 whole games (CleanRL's ``charts/avg_episodic_return``; distrl's
``episode_return_mean`` with ``train.return_window: 20``). A Pong game has no lives and its points
are +-1, so EnvPool's episodic-life and reward-clipping options leave a game's score as it is.
"The last 100k steps" is the mean of that statistic over the updates that end after agent step
900,000.

What differs: EnvPool's version (CleanRL's gym-0.23 script needs envpool 0.8.4, distrl uses envpool
1.2.5: same C++ env code and ROM), EnvPool's auto-reset (atari_peer_bench.py's docstring), and the
arithmetic: distrl's ``train.mixed_precision: auto`` is bf16 autocast of the CNN on a CPU with bf16
units, float32 elsewhere; CleanRL is float32.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from collections import deque
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from atari_peer_bench import CONFIG, ENV_ID, NUM_ENVS, ensure_peer  # noqa: E402
from cartpole_bench import distrl_cmd, env_without_launcher, metrics_rows  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results" / "atari_pong"
WORK = REPO / "runs" / "atari_learning_bench"
FIGURE = REPO / "benchmarks" / "figures" / "pong_learning.png"
STEPS = 1_000_000
LAST_STEPS = 100_000
WINDOW = 20
"""Whole games averaged into each update's score, as CleanRL's ``avg_returns`` deque."""
KEPT = ("global_step", "time_s", "update", "ranks", "episode_return_mean", "episodes")
"""The metrics.jsonl keys a kept curve needs (distrl's rows have many more)."""
PEER = "CleanRL 1.2.0 ppo_atari_envpool.py"

PEER_GAMES = """
import glob, json, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
acc = EventAccumulator(glob.glob(sys.argv[1] + "/runs/*")[0], size_guidance={"scalars": 0})
acc.Reload()
print(json.dumps([[e.step, e.wall_time, e.value] for e in acc.Scalars("charts/episodic_return")]))
"""
"""(global step, wall time, raw game score) of every whole game of the CleanRL run in ``argv[1]``."""


def one_thread_env() -> dict[str, str]:
    return {**env_without_launcher(), "OMP_NUM_THREADS": "1"}


def distrl_command(seed: int, steps: int, run_dir: Path) -> tuple[list[str], Path]:
    kwargs = "{episodic_life: true, reward_clip: true, num_threads: 1}"
    args = [
        "--total-steps", str(steps), "--seed", str(seed), "log.progress=false", "train.device=cpu",
        f"train.return_window={WINDOW}", "env.backend=envpool", f"env.id={ENV_ID}", f"env.kwargs={kwargs}",
    ]  # fmt: skip
    return distrl_cmd(1, run_dir, *args, config=CONFIG), REPO


def peer_command(python: Path, seed: int, steps: int, work_dir: Path) -> tuple[list[str], Path]:
    work_dir.mkdir(parents=True, exist_ok=True)
    return [
        str(python), "-m", "cleanrl.ppo_atari_envpool", "--env-id", ENV_ID, "--seed", str(seed),
        "--total-timesteps", str(steps), "--num-envs", str(NUM_ENVS), "--num-steps", "128",
        "--num-minibatches", "4", "--update-epochs", "4", "--cuda", "False", "--track", "False",
        "--capture-video", "False",
    ], work_dir  # fmt: skip


def keep_distrl(run_dir: Path, kept: Path) -> None:
    rows = [{k: row[k] for k in KEPT if k in row} for row in metrics_rows(run_dir)]
    write_run(kept, rows, yaml.safe_load((run_dir / "config.yaml").read_text()))


def keep_peer(python: Path, work_dir: Path, kept: Path, seed: int, steps: int) -> None:
    """CleanRL's games as distrl-style rows: one per update, the mean of the last ``WINDOW`` games."""
    done = subprocess.run(
        [str(python), "-c", PEER_GAMES, str(work_dir)], check=True, capture_output=True, text=True
    )
    games = sorted(json.loads(done.stdout))
    update_steps = NUM_ENVS * 128
    recent: deque[float] = deque(maxlen=WINDOW)
    rows, next_game = [], 0
    for update, step in enumerate(range(update_steps, steps + 1, update_steps), start=1):
        finished = 0
        while next_game < len(games) and games[next_game][0] <= step:
            recent.append(games[next_game][2])
            next_game += 1
            finished += 1
        if recent:
            rows.append({
                "global_step": step, "update": update, "ranks": 1, "episodes": finished,
                "episode_return_mean": statistics.fmean(recent),
            })  # fmt: skip
    config = {"peer": PEER, "env": {"id": ENV_ID, "num_envs": NUM_ENVS}, "train": {"seed": seed}}
    write_run(kept, rows, config)


def write_run(kept: Path, rows: list[dict], config: dict) -> None:
    kept.mkdir(parents=True, exist_ok=True)
    (kept / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (kept / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=True))


def run_side(side: str, seeds: list[int], steps: int, jobs: int) -> None:
    """Each seed's run, ``jobs`` at a time; a finished run's curve goes to RESULTS."""
    python = ensure_peer() if side == "cleanrl" else None
    pending = list(seeds)
    running: dict[int, subprocess.Popen] = {}
    while pending or running:
        while pending and len(running) < jobs:
            seed = pending.pop(0)
            work = WORK / f"{side}_s{seed}"
            if python is None:
                cmd, cwd = distrl_command(seed, steps, work)
            else:
                shutil.rmtree(work, ignore_errors=True)
                cmd, cwd = peer_command(python, seed, steps, work)
            log = (WORK / f"{side}_s{seed}.log").open("w")
            running[seed] = subprocess.Popen(
                cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT, env=one_thread_env()
            )
            print(f"{side} seed {seed}: started ({WORK / f'{side}_s{seed}.log'})", flush=True)
        seed, code = wait_any(running)
        work = WORK / f"{side}_s{seed}"
        if code != 0:
            sys.exit(f"{side} seed {seed}: exit {code}; see {WORK / f'{side}_s{seed}.log'}")
        kept = RESULTS / f"{side}_s{seed}"
        if python is None:
            keep_distrl(work, kept)
        else:
            keep_peer(python, work, kept, seed, steps)
        print(f"{side} seed {seed}: done, curve in {kept}", flush=True)


def wait_any(running: dict[int, subprocess.Popen]) -> tuple[int, int]:
    """(seed, exit code) of the first of ``running`` to end, removed from it."""
    pid, status = os.wait()
    seed = next(s for s, proc in running.items() if proc.pid == pid)
    proc = running.pop(seed)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return seed, proc.returncode


def last_steps_score(kept: Path, steps: int) -> float:
    scores = [
        row.get("episode_return_mean")
        for row in metrics_rows(kept)
        if row["global_step"] > steps - LAST_STEPS
    ]
    return statistics.fmean(score for score in scores if score is not None)


def report(steps: int) -> None:
    sides = {side: sorted(RESULTS.glob(f"{side}_s*")) for side in ("distrl", "cleanrl")}
    missing = [side for side, dirs in sides.items() if not dirs]
    if missing:
        sys.exit(f"no curves yet for {', '.join(missing)}: run `run --side {missing[0]}` first")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "distrl",
            "plot",
            *map(str, sides["distrl"] + sides["cleanrl"]),
            "--out",
            str(FIGURE),
        ],
        check=True,
    )
    print(f"figure: {FIGURE.relative_to(REPO)}\n")
    print(
        f"| contender | seeds | mean score, last {LAST_STEPS:,} of {steps:,} agent steps, per seed | mean |"
    )
    print("| --- | --- | --- | --- |")
    for side, dirs in sides.items():
        scores = [last_steps_score(d, steps) for d in dirs]
        name = PEER if side == "cleanrl" else "distrl (envpool, mixed_precision auto)"
        seeds = ", ".join(d.name.rsplit("_s", 1)[1] for d in dirs)
        each = " / ".join(f"{s:.1f}" for s in scores)
        print(f"| {name} | {seeds} | {each} | {statistics.fmean(scores):.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="train one side's seeds and keep their curves")
    run.add_argument("--side", choices=["distrl", "cleanrl"], required=True)
    run.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    run.add_argument("--jobs", type=int, default=3, help="seeds run side by side")
    run.add_argument("--steps", type=int, default=STEPS, help="agent steps per run")
    shown = commands.add_parser("report", help="plot both sides' kept curves and print the table")
    shown.add_argument("--steps", type=int, default=STEPS)
    args = parser.parse_args()
    if args.command == "run":
        WORK.mkdir(parents=True, exist_ok=True)
        run_side(args.side, args.seeds, args.steps, args.jobs)
    else:
        report(args.steps)


if __name__ == "__main__":
    main()
