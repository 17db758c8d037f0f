"""A chaos soak: one workload trained for a while under faults drawn from a seed, with what each
fault cost and how every process's memory moved.

Usage:
    python benchmarks/chaos_soak.py --workload WORKLOAD [--minutes 30] [--fault-every 60]
        [--faults N] [--seed 0] [--set KEY=VALUE ...] [--run-dir DIR]
        [--out results/chaos_<workload>.json]

``--fault-every 0`` runs the workload without faults: the memory baseline, every process living
the whole run. ``--faults N`` ends the soak once N faults were injected and recovered from (or at
``--minutes``, whichever comes first): the first N kinds of the drawn order, so N distinct kinds
up to the workload's count, however fast or slow the machine. ``--set KEY=VALUE`` adds a config
override to the workload's command line (e.g. a shorter ``workers.call_timeout_s``, so that a
hang is named sooner).

Workloads: 2 ranks under torchrun's elastic agent of PPO on CartPole (``ppo-torchrun``), on
Pong's pixels (``atari-ppo-torchrun``), recurrent PPO (``lstm-ppo-torchrun``), SAC on Pendulum
(``sac-torchrun``), APPO with a collector process per rank (``appo-torchrun``) and GRPO with its
weights sharded over the ranks (``grpo-sharded-torchrun``); GRPO in Ray mode with verifier,
prompt and eval workers (``grpo-ray``) and asynchronous, with a generation worker one update
ahead (``grpo-async-ray``).

Faults come at random times (uniform between a third of ``--fault-every`` and all of it after the
run recovered from the last one), so they land in updates, collectives and checkpoint writes
alike; their kinds cycle through the workload's kinds in an order drawn from the seed, so each
kind comes as often as the others. Kinds:

- ``sigkill-rank`` / ``sigkill-learner``: a training process killed; torchrun's elastic agent
  (``--max-restarts``) or Ray mode's driver starts the group again from the newest checkpoint.
- ``sigstop-rank`` / ``sigstop-verifier``: a process stopped (a hang); its peers' collectives
  time out (``comm.timeout_s``) or the learner's call does (``workers.call_timeout_s``), and it
  is handled as a crash.
- ``sigkill-verifier``, ``sigkill-prompt``, ``sigkill-eval``, ``sigkill-generation``: a Ray
  worker killed; Ray restarts it and the learner does its work again.
- ``sigkill-collector``: a rank's collector process killed; the rank starts it again and collects
  the lost segment anew.
- ``sigterm-driver``: the launcher stopped by SIGTERM, then started again with ``--resume``.
- ``sigkill-launcher``: torchrun's agent killed (its ranks get no signal: they must notice and
  stop with a checkpoint), then started again with ``--resume``.
- ``truncate-checkpoint``: the newest checkpoint's largest file (one shard of a sharded one) cut
  to half once an older one exists, then a training process killed: the resume must pass over
  it to the one before.

Per fault it records the kind, its time, the step it hit, the launcher restarts so far, the time
until training went on (a new metrics row) and the env steps (or completions) lost: those
trained past the checkpoint the run resumed from. Hangs also record the time until the one line
that names them. Every 2 s it samples each process's resident memory (the launcher's whole
process tree, Ray's included); the summary gives each process's RSS slope, in % of its mean per
hour, over the last two-thirds of its life (processes that lived at least a minute), and the
whole tree's. At the end the run must have trained every update once: its metrics rows count
updates 1, 2, ... with none missing or repeated; and GRPO every prompt once (its ledger).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
RECOVERY_S = 240.0
"""A fault the run has not recovered from (no new metrics row) within this is not survived."""
TAIL = 400
"""Metrics rows read while watching a fault: the newest, past any checkpoint a launch resumes from."""


@dataclass
class Fault:
    kind: str
    at_s: float
    """Seconds since the soak began."""
    step: int
    """The run's newest logged step when it hit."""
    survived: bool = False
    recovered_s: float | None = None
    """Until the next metrics row."""
    detected_s: float | None = None
    """Hangs: until the line naming them."""
    steps_lost: int = 0
    restarts: int = 0
    """Launcher restarts so far (``launcher_restarts`` of the newest row)."""


@dataclass
class Workload:
    """How to start the run, and its fault kinds (kind -> what does it, given the soak)."""

    command: Callable[[Soak, bool], list[str]]
    """The command line, given the soak and whether it resumes."""
    kinds: dict[str, Callable[[Soak], None]]
    kept_running: set[str]
    """The kinds training goes on through (a worker beside the learners restarted): over at the
    next row; the others are over at the first row of a new launch."""
    hang_line: str
    """What the line naming a hang contains."""


class Soak:
    def __init__(
        self, workload: str, run_dir: Path, seed: int, fault_every: float, overrides: list[str]
    ) -> None:
        self.workload_name = workload
        self.workload = WORKLOADS[workload]
        self.overrides = overrides
        """Config overrides after the workload's own (``--set``)."""
        self.run_dir = run_dir
        self.rng = random.Random(seed)
        self.fault_every = fault_every
        self.began = time.monotonic()
        self.log = run_dir.parent / f"{run_dir.name}.launcher.log"
        self.process: subprocess.Popen | None = None
        self.samples: list[tuple[float, int, str, int]] = []
        """(seconds, pid, name, RSS bytes)."""
        self.faults: list[Fault] = []
        self.launches = 0
        self.stopped: list[psutil.Process] = []
        """Processes stopped by a fault, killed when the launcher is stopped or the soak ends."""

    # ----------------------------------------------------------------------------- the run
    def start(self, resume: bool) -> None:
        self.launches += 1
        out = self.log.open("a")
        self.process = subprocess.Popen(
            [*self.workload.command(self, resume), *self.overrides], cwd=REPO, stdout=out,
            stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "1"}, start_new_session=True,
        )  # fmt: skip

    def rows(self, last: int | None = None) -> list[dict]:
        """The run's metrics rows (``last``: only the last so many)."""
        path = self.run_dir / "metrics.jsonl"
        if not path.is_file():
            return []
        rows = []
        for line in path.read_text().splitlines()[-last if last else 0 :]:
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:  # a row being written
                continue
        return rows

    def tree(self) -> list[psutil.Process]:
        if self.process is None:
            return []
        try:
            root = psutil.Process(self.process.pid)
            return [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return []

    def processes_named(self, pattern: str) -> list[psutil.Process]:
        found = []
        for proc in self.tree():
            try:
                if re.search(pattern, " ".join(proc.cmdline())):
                    found.append(proc)
            except psutil.Error:
                continue
        return found

    def sample(self) -> None:
        now = time.monotonic() - self.began
        for proc in self.tree():
            try:
                name = " ".join(proc.cmdline())[:80]
                self.samples.append((now, proc.pid, name, proc.memory_info().rss))
            except psutil.Error:
                continue

    def wait(self, seconds: float) -> None:
        """Sample while ``seconds`` pass; a launcher that ended is started again with --resume
        (a fault that stops it, or one it could not survive on its own)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.sample()
            if self.process is not None and self.process.poll() is not None:
                self.start(resume=True)
            time.sleep(2.0)

    def wait_for_start(self, seconds: float) -> None:
        """Sample while ``seconds`` pass, then until the first checkpoint is written: past
        start-up, every worker up, however loaded the machine."""
        self.wait(seconds)
        while not list((self.run_dir / "checkpoints").glob("step_*")):
            self.wait(1.0)

    # ----------------------------------------------------------------------------- faults
    def inject(self, kind: str) -> None:
        rows = self.rows(last=TAIL)
        before = rows[-1] if rows else {"global_step": 0, "update": 0, "resumes": 0}
        fault = Fault(kind, time.monotonic() - self.began, before["global_step"])
        old = {_key(row) for row in self.rows()}  # every row written before the fault
        said_before = self.log.read_text(errors="replace").count(self.workload.hang_line)
        self.faults.append(fault)
        self.workload.kinds[kind](self)
        hit = time.monotonic()
        undetected_hang = kind.startswith("sigstop")
        # The newest row before the fault; for a hang, before it was detected (an update in flight
        # when the process stopped may still log one).
        seen = before
        while time.monotonic() < hit + RECOVERY_S:
            self.sample()
            if self.process is not None and self.process.poll() is not None:
                self.start(resume=True)
            if (
                undetected_hang
                and self.log.read_text(errors="replace").count(self.workload.hang_line) > said_before
            ):
                fault.detected_s = time.monotonic() - hit
                undetected_hang, seen = False, (self.rows(last=1) or [before])[-1]
            now_rows = self.rows(last=TAIL)
            # A fault that restarts training is over at the first row of a launch after it: one
            # more launcher restart, or a new launcher (restarts from 0) one more resume. (A resume
            # past a corrupt checkpoint to an older one takes that one's count of resumes: only
            # the launcher's restarts tell then.) One it goes on through, at the first row of a
            # later update.
            relaunched = [row for row in now_rows if _launch(row) != _launch(before) and _key(row) not in old]
            later = [row for row in now_rows if row["update"] > seen["update"]]
            first_new = (later if kind in self.workload.kept_running else relaunched)[:1]
            if first_new and not undetected_hang:
                fault.survived = True
                fault.recovered_s = time.monotonic() - hit
                # A resumed run's first new row is one update past the checkpoint it resumed from.
                if len(rows) > 1:
                    resumed_from = first_new[0]["global_step"] - _steps_per_update(rows)
                    fault.steps_lost = max(fault.step - resumed_from, 0)
                fault.restarts = int(now_rows[-1].get("launcher_restarts", 0))
                break
            time.sleep(0.5)

    def signal_named(self, pattern: str, signum: int) -> None:
        found = self.processes_named(pattern)
        if not found:
            raise RuntimeError(f"no process matching {pattern!r} to signal")
        victim = self.rng.choice(found)
        victim.send_signal(signum)
        if signum == signal.SIGSTOP:  # never left behind stopped, whatever handles the hang
            self.stopped.append(victim)

    def stop_launcher(self) -> None:
        """SIGTERM to the launcher (a scheduler's preemption); started again with --resume."""
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self._kill_leftovers()
        self.start(resume=True)

    def truncate_newest_checkpoint(self) -> bool:
        """Its largest safetensors file (the weights or optimiser state; one shard of a sharded
        checkpoint) cut in half, once there is one before it to resume from (with none, the run
        stops in one line: nothing to survive). Whether it was cut."""
        checkpoints = sorted((self.run_dir / "checkpoints").glob("step_*"))
        if len(checkpoints) < 2:
            return False
        files = sorted(checkpoints[-1].rglob("*.safetensors"), key=lambda f: f.stat().st_size)
        if not files:
            return False
        with files[-1].open("r+b") as f:
            f.truncate(files[-1].stat().st_size // 2)
        return True

    def _kill_leftovers(self) -> None:
        for proc in self.stopped:
            try:
                proc.kill()
            except psutil.Error:
                continue
        self.stopped = []

    def finish(self) -> None:
        """Stop the run as a scheduler would (SIGTERM), and anything it left."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=180)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
        self._kill_leftovers()

    # ----------------------------------------------------------------------------- figures
    def summary(self) -> dict:
        rows = self.rows()
        updates = [row["update"] for row in rows]
        return {
            "workload": self.workload_name,
            "minutes": (time.monotonic() - self.began) / 60,
            "launches": self.launches,
            "faults": [asdict(f) for f in self.faults],
            "injected": len(self.faults),
            "survived": sum(f.survived for f in self.faults),
            "updates": len(updates),
            "every_update_once": updates == list(range(1, len(updates) + 1)),
            "every_prompt_once": _each_once(self.run_dir / "ledger.jsonl"),
            "final_step": rows[-1]["global_step"] if rows else 0,
            "steps_lost_by_kind": _by_kind(self.faults, lambda f: f.steps_lost),
            "recovered_s_by_kind": _by_kind(self.faults, lambda f: f.recovered_s or 0.0),
            "hang_detected_s": [f.detected_s for f in self.faults if f.kind.startswith("sigstop")],
            **rss_slopes(self.samples),
        }


def _each_once(ledger: Path) -> bool | None:
    """Every index in the run's ledger (GRPO's prompts, update by update) appears once; None
    without a ledger."""
    if not ledger.is_file():
        return None
    trained = [i for line in ledger.read_text().splitlines() for i in json.loads(line)["trained"]]
    return len(trained) == len(set(trained))


def _launch(row: dict) -> tuple[int, int]:
    """Which launch wrote a metrics row."""
    return row.get("resumes", 0), row.get("launcher_restarts", 0)


def _key(row: dict) -> tuple[int, int, int, float]:
    """A metrics row, told apart from one a later launch writes for the same update."""
    return (*_launch(row), row["update"], row.get("time_s", 0.0))


def _steps_per_update(rows: list[dict]) -> int:
    return rows[-1]["global_step"] - rows[-2]["global_step"] if len(rows) > 1 else rows[-1]["global_step"]


def _by_kind(faults: list[Fault], figure: Callable[[Fault], float]) -> dict[str, list[float]]:
    kinds: dict[str, list[float]] = {}
    for fault in faults:
        kinds.setdefault(fault.kind, []).append(figure(fault))
    return kinds


def _slope_per_hour(points: list[tuple[float, int]]) -> float:
    """Least-squares slope of RSS over time, in % of the mean RSS per hour."""
    n = len(points)
    mean_t = sum(t for t, _ in points) / n
    mean_r = sum(r for _, r in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0 or mean_r == 0:
        return 0.0
    slope = sum((t - mean_t) * (r - mean_r) for t, r in points) / var
    return 100.0 * slope * 3600.0 / mean_r


def _role(command: str) -> str:
    """What a process is, from its command line: a Ray process's title, the module a Python
    process runs, or the program."""
    words = command.split()
    if not words:
        return "?"
    if "-m" in words[:-1]:
        return words[words.index("-m") + 1]
    return words[0] if words[0].startswith("ray::") else words[0].rsplit("/", 1)[-1]


def rss_slopes(samples: list[tuple[float, int, str, int]], min_life_s: float = 60.0) -> dict:
    """Each process's RSS slope over the last two-thirds of its sampled life (those that lived
    ``min_life_s``), and the whole tree's over the last two-thirds of the soak."""
    by_pid: dict[int, list[tuple[float, int]]] = {}
    names: dict[int, str] = {}
    for t, pid, name, rss in samples:
        by_pid.setdefault(pid, []).append((t, rss))
        names[pid] = name
    per_process = {}
    for pid, points in by_pid.items():
        if points[-1][0] - points[0][0] >= min_life_s:
            start = points[0][0] + (points[-1][0] - points[0][0]) / 3
            per_process[f"{pid} {names[pid]}"] = _slope_per_hour([p for p in points if p[0] >= start])
    totals: dict[float, int] = {}
    for t, _, _, rss in samples:
        totals[t] = totals.get(t, 0) + rss
    tree = sorted(totals.items())
    tree_slope = 0.0
    if tree:
        start = tree[0][0] + (tree[-1][0] - tree[0][0]) / 3
        tree_slope = _slope_per_hour([p for p in tree if p[0] >= start])
    by_role: dict[str, float] = {}
    for process, slope in per_process.items():
        role = _role(process.split(" ", 1)[1])
        by_role[role] = max(by_role.get(role, -math.inf), slope)
    return {
        "rss_slope_pct_per_hour": per_process,
        "rss_slope_max_pct_per_hour_by_role": by_role,
        "rss_slope_max_pct_per_hour": max(per_process.values(), default=0.0),
        "tree_rss_slope_pct_per_hour": tree_slope,
    }


# --------------------------------------------------------------------------------- workloads
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _torchrun(config: str, *overrides: str) -> Callable[[Soak, bool], list[str]]:
    """2 ranks of ``config`` under torchrun's elastic agent, restarting them after any failure."""

    def command(soak: Soak, resume: bool) -> list[str]:
        return [
            sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
            "--max-restarts=1000", "--master_addr=127.0.0.1", f"--master_port={_free_port()}",
            "-m", "distrl.train", "--config", config, "--run-dir", str(soak.run_dir), "--distributed",
            *(["--resume"] if resume else []), "train.total_steps=1000000000", "train.stop_return=null",
            "checkpoint.keep_last=3", "comm.timeout_s=15", "log.progress=false", "log.tensorboard=false",
            *overrides,
        ]  # fmt: skip

    return command


def _ray(config: str, *overrides: str) -> Callable[[Soak, bool], list[str]]:
    """``config`` in Ray mode on a local Ray instance the launcher starts."""

    def command(soak: Soak, resume: bool) -> list[str]:
        return [
            sys.executable, "-m", "distrl", "train", "--config", config, "--launcher", "ray",
            "--run-dir", str(soak.run_dir), *(["--resume"] if resume else []),
            "train.total_steps=1000000000", "train.stop_return=null", "checkpoint.keep_last=3",
            "workers.call_timeout_s=20", "workers.max_restarts=5", "log.progress=false",
            "log.tensorboard=false", *overrides,
        ]  # fmt: skip

    return command


RANK = r"^(?!.*torch\.distributed\.run).*-m distrl\.train"
"""A rank's command line, not its launcher's (which names the module it runs too)."""
LEARNER = r"^ray::Learner"
LAUNCHER = r"-m torch\.distributed\.run"
COLLECTOR = r"--multiprocessing-fork"
"""A rank's collector process (started by multiprocessing's spawn)."""


def _truncate_then_kill(pattern: str) -> Callable[[Soak], None]:
    def fault(soak: Soak) -> None:
        if not soak.truncate_newest_checkpoint():  # a kill alone, and counted as one
            soak.faults[-1].kind = "sigkill (no older checkpoint: none cut)"
        soak.signal_named(pattern, signal.SIGKILL)

    return fault


def _signal(pattern: str, signum: int) -> Callable[[Soak], None]:
    return lambda soak: soak.signal_named(pattern, signum)


RANK_FAULTS: dict[str, Callable[[Soak], None]] = {
    "sigkill-launcher": _signal(LAUNCHER, signal.SIGKILL),
    "sigkill-rank": _signal(RANK, signal.SIGKILL),
    "sigstop-rank": _signal(RANK, signal.SIGSTOP),
    "sigterm-driver": Soak.stop_launcher,
    "truncate-checkpoint": _truncate_then_kill(RANK),
}
"""A torchrun workload's faults."""
RANK_HANG_LINE = "did not say its collective failed"


def _torchrun_workload(
    config: str, *overrides: str, **kept_running_faults: Callable[[Soak], None]
) -> Workload:
    """``config`` on 2 torchrun ranks with the rank faults, and ``kept_running_faults`` (faults of
    processes beside the ranks, which training goes on through)."""
    return Workload(
        _torchrun(config, *overrides),
        {**RANK_FAULTS, **{kind.replace("_", "-"): fault for kind, fault in kept_running_faults.items()}},
        kept_running={kind.replace("_", "-") for kind in kept_running_faults},
        hang_line=RANK_HANG_LINE,
    )


GRPO_RAY_FAULTS: dict[str, Callable[[Soak], None]] = {
    "sigkill-verifier": _signal(r"^ray::VerifierWorker", signal.SIGKILL),
    "sigkill-prompt": _signal(r"^ray::PromptWorker", signal.SIGKILL),
    "sigkill-eval": _signal(r"^ray::EvalWorker", signal.SIGKILL),
    "sigstop-verifier": _signal(r"^ray::VerifierWorker", signal.SIGSTOP),
    "sigkill-learner": _signal(LEARNER, signal.SIGKILL),
    "sigterm-driver": Soak.stop_launcher,
    "truncate-checkpoint": _truncate_then_kill(LEARNER),
}
WORKER_HANG_LINE = "no answer within workers.call_timeout_s"
GRPO_RAY_KEPT_RUNNING = {"sigkill-verifier", "sigkill-prompt", "sigkill-eval", "sigstop-verifier"}

WORKLOADS = {
    "ppo-torchrun": _torchrun_workload("configs/cartpole_ppo.yaml", "checkpoint.interval_steps=20480"),
    "atari-ppo-torchrun": _torchrun_workload("configs/atari_pong_ppo.yaml", "checkpoint.interval_steps=8192"),
    "lstm-ppo-torchrun": _torchrun_workload(
        "configs/cartpole_positions_lstm_ppo.yaml", "checkpoint.interval_steps=8192"
    ),
    "sac-torchrun": _torchrun_workload(
        "configs/pendulum_sac.yaml",
        "env.num_envs=2",
        "algo.rollout_steps=16",
        "algo.gradient_steps=16",
        "checkpoint.interval_steps=2048",
    ),
    "appo-torchrun": _torchrun_workload(
        "configs/cartpole_appo.yaml",
        "checkpoint.interval_steps=20480",
        sigkill_collector=_signal(COLLECTOR, signal.SIGKILL),
    ),
    "grpo-sharded-torchrun": _torchrun_workload(
        "configs/grpo_reverse.yaml", "train.sharding=fsdp", "checkpoint.interval_steps=4096"
    ),
    "grpo-ray": Workload(
        _ray("configs/grpo_small_cpu.yaml", "checkpoint.interval_steps=8192"),
        GRPO_RAY_FAULTS,
        kept_running=GRPO_RAY_KEPT_RUNNING,
        hang_line=WORKER_HANG_LINE,
    ),
    "grpo-async-ray": Workload(
        _ray(
            "configs/grpo_small_cpu.yaml",
            "workers.generation=1",
            "collect.lag=1",
            "workers.cpus_per_generation=0.5",
            "workers.cpus_per_policy=0.5",
            "checkpoint.interval_steps=8192",
        ),
        {**GRPO_RAY_FAULTS, "sigkill-generation": _signal(r"^ray::GenerationWorker", signal.SIGKILL)},
        kept_running={*GRPO_RAY_KEPT_RUNNING, "sigkill-generation"},
        hang_line=WORKER_HANG_LINE,
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), required=True)
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument(
        "--fault-every", type=float, default=60.0, help="at most this many seconds between faults"
    )
    parser.add_argument(
        "--faults", type=int, default=0, help="end after this many faults (0: at --minutes only)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a config override of the run"
    )
    parser.add_argument("--run-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    run_dir = args.run_dir or REPO / "runs" / f"chaos_{args.workload}"
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    soak = Soak(args.workload, run_dir, args.seed, args.fault_every, args.set)
    soak.log.unlink(missing_ok=True)
    kinds = list(soak.workload.kinds)
    soak.start(resume=False)
    try:
        soak.wait_for_start(20.0)
        order: list[str] = []
        if not args.fault_every:  # the memory baseline: the same run without faults
            soak.wait(args.minutes * 60 - 20.0)
        while (
            args.fault_every
            and time.monotonic() - soak.began < args.minutes * 60
            and not (args.faults and len(soak.faults) >= args.faults)
        ):
            if not order:
                order = soak.rng.sample(kinds, len(kinds))
            soak.wait(soak.rng.uniform(args.fault_every / 3, args.fault_every))
            soak.inject(order.pop())
    finally:
        soak.finish()
    summary = soak.summary()
    out = args.out or REPO / "benchmarks" / "results" / f"chaos_{args.workload}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=1))
    brief = {k: v for k, v in summary.items() if k not in ("faults", "rss_slope_pct_per_hour")}
    print(json.dumps(brief, indent=1))


if __name__ == "__main__":
    main()
