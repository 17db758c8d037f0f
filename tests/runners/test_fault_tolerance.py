"""Runs that survive: elastic restarts after SIGKILL, preemption by signal, corrupt checkpoints."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distrl.io import checkpoint as ckpt
from distrl.launch.preemption import PREEMPTED_EXIT_CODE
from tests.distributed import free_port
from tests.helpers import CARTPOLE, clean_env, distrl

STEPS_PER_UPDATE = 32 * 16
"""The shipped config's global batch, the same on 1 or 2 ranks."""


def metrics_steps(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line)["global_step"] for line in path.read_text().splitlines() if line.strip()]


def children(pid: int) -> list[int]:
    """Live processes whose parent is ``pid`` (torchrun's workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def start_torchrun(run_dir: Path, *args: str, max_restarts: int = 0) -> subprocess.Popen:
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2",
        f"--max-restarts={max_restarts}", "--master_addr=127.0.0.1", f"--master_port={free_port()}",
        "-m", "distrl.train", "--config", str(CARTPOLE), "--run-dir", str(run_dir), *args, "--distributed",
    ]  # fmt: skip
    return subprocess.Popen(cmd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(condition, timeout_s: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert proc.poll() is None, f"launch ended early: {proc.communicate()[1][-3000:]}"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def run_with_two_sigkills(run_dir: Path, *args: str) -> None:
    """torchrun --max-restarts=3 with a random rank SIGKILLed twice at random points."""
    proc = start_torchrun(run_dir, "checkpoint.interval_steps=8192", *args, max_restarts=3)
    rng = random.Random(1234)
    for _ in range(2):
        # Kill a random rank a random number of updates after the last logged step.
        target = max(metrics_steps(run_dir) or [0]) + rng.randint(12, 28) * STEPS_PER_UPDATE
        wait_for(lambda t=target: max(metrics_steps(run_dir) or [0]) >= t, 240, proc)
        time.sleep(rng.uniform(0.0, 0.05))
        victim = rng.choice(children(proc.pid))
        os.kill(victim, signal.SIGKILL)
        wait_for(lambda v=victim: v not in children(proc.pid) and len(children(proc.pid)) == 2, 120, proc)
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-3000:]
    state = json.loads((ckpt.resolve_checkpoint(run_dir) / "state.json").read_text())
    assert state["launch_index"] == 2  # two automatic resumes, no --resume given
    # No update missing or logged twice across the restarts.
    steps = metrics_steps(run_dir)
    assert steps == list(range(STEPS_PER_UPDATE, steps[-1] + 1, STEPS_PER_UPDATE))
    assert state["global_step"] == steps[-1]


def test_chaos_fixed_budget_ends_at_the_same_step_as_an_uninterrupted_run(tmp_path: Path) -> None:
    total = 140 * STEPS_PER_UPDATE
    run_with_two_sigkills(tmp_path, f"--total-steps={total}", "train.stop_return=null")
    assert metrics_steps(tmp_path)[-1] == total


def test_chaos_run_still_solves_cartpole(tmp_path: Path) -> None:
    run_with_two_sigkills(tmp_path, "--total-steps=300000")
    report = json.loads(distrl("eval", "--checkpoint", str(tmp_path), "--json").stdout)
    assert report["return_mean"] >= 475


def test_sigterm_to_one_rank_stops_all_with_a_checkpoint_and_resumes(tmp_path: Path) -> None:
    total = 120 * STEPS_PER_UPDATE
    proc = start_torchrun(
        tmp_path, f"--total-steps={total}", "train.stop_return=null", "checkpoint.interval_steps=1000000"
    )
    wait_for(lambda: len(metrics_steps(tmp_path)) >= 5, 240, proc)
    os.kill(children(proc.pid)[-1], signal.SIGTERM)  # one rank only
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode != 0
    assert f"exitcode  : {PREEMPTED_EXIT_CODE}" in stderr
    assert "distrl: preempted by a signal on another rank at step" in stderr
    stopped_at = metrics_steps(tmp_path)[-1]
    assert stopped_at < total
    assert ckpt.resolve_checkpoint(tmp_path).name == ckpt.checkpoint_dir_name(stopped_at)

    resumed = distrl(
        "train", "--config", str(CARTPOLE), "--run-dir", str(tmp_path), "--resume",
        f"--total-steps={total}", "train.stop_return=null",
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    steps = metrics_steps(tmp_path)
    assert steps == sorted(set(steps)) and steps[-1] >= total
    # Resumed on 1 rank instead of 2: global sizes keep the global batch the same.
    assert steps[-1] - steps[-2] == STEPS_PER_UPDATE


def test_sigterm_single_process_exit_code(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "distrl", "train", "--config", str(CARTPOLE), "--run-dir", str(tmp_path),
           "--total-steps=10000000", "train.stop_return=null"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=clean_env(), stderr=subprocess.PIPE, text=True)
    wait_for(lambda: len(metrics_steps(tmp_path)) >= 3, 120, proc)
    proc.send_signal(signal.SIGUSR1)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == PREEMPTED_EXIT_CODE, stderr
    assert ckpt.resolve_checkpoint(tmp_path).name == ckpt.checkpoint_dir_name(metrics_steps(tmp_path)[-1])


@pytest.fixture
def three_checkpoints(tmp_path: Path) -> Path:
    result = distrl(
        "train", "--config", str(CARTPOLE), "--run-dir", str(tmp_path), "--total-steps=3072",
        "train.stop_return=null", "checkpoint.interval_steps=1024", "checkpoint.keep_last=5",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert len(ckpt.list_checkpoints(tmp_path / "checkpoints")) == 3
    return tmp_path


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_corrupt_newest_checkpoint_falls_back_to_previous(three_checkpoints: Path, damage: str) -> None:
    previous, newest = ckpt.list_checkpoints(three_checkpoints / "checkpoints")[-2:]
    target = newest / "model.safetensors"
    data = bytearray(target.read_bytes())
    if damage == "truncate":
        target.write_bytes(data[: len(data) // 2])
    else:
        data[len(data) // 2] ^= 0xFF
        target.write_bytes(bytes(data))
    result = distrl(
        "train", "--config", str(CARTPOLE), "--run-dir", str(three_checkpoints), "--resume",
        "--total-steps=4096", "train.stop_return=null",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"skipping checkpoint {newest}" in result.stderr
    assert f"resuming from {previous}" in result.stderr
    assert metrics_steps(three_checkpoints) == list(range(512, 4097, 512))


def test_no_valid_checkpoint_is_a_clear_error(three_checkpoints: Path) -> None:
    for path in ckpt.list_checkpoints(three_checkpoints / "checkpoints"):
        (path / "state.json").write_text("{}")
    result = distrl("train", "--config", str(CARTPOLE), "--run-dir", str(three_checkpoints), "--resume")
    assert result.returncode == 2
    assert "no valid checkpoint" in result.stderr and "Traceback" not in result.stderr
