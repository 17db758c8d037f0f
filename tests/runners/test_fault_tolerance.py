"""Runs that survive: elastic restarts after SIGKILL, preemption by signal, corrupt checkpoints;
for PPO from envs and for DQN from logged data alike."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distrl.io import checkpoint as ckpt
from distrl.launch.preemption import PREEMPTED_EXIT_CODE
from tests.distributed import free_port
from tests.helpers import CARTPOLE, GRPO_REVERSE, OFFLINE, children, clean_env, collect, distrl, train_ranks
from tests.stopping import kill_tree

STEPS_PER_UPDATE = 32 * 16
"""The shipped PPO config's global batch, the same on 1 or 2 ranks; offline DQN below is set to
train on as many logged rows per update (8 gradient steps of 64)."""


@pytest.fixture(scope="module")
def logged_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 files of 1024 rows: 2 ranks hold 2048 rows each, an epoch of 64 steps on both."""
    out = tmp_path_factory.mktemp("logged") / "cartpole"
    collect(out, 4096, 1024, seed=1)
    return out


@pytest.fixture(scope="module", params=["ppo", "offline-dqn"])
def training(request: pytest.FixtureRequest) -> list[str]:
    """The config arguments of a run: PPO on CartPole, or DQN from logged CartPole transitions."""
    if request.param == "ppo":
        return ["--config", str(CARTPOLE)]
    data = request.getfixturevalue("logged_data")
    return [
        "--config", str(OFFLINE), "--data", str(data), "algo.batch_size=64", "algo.gradient_steps=8",
        "log.tensorboard=false",
    ]  # fmt: skip


def metrics_steps(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line)["global_step"] for line in path.read_text().splitlines() if line.strip()]


def start_torchrun(
    run_dir: Path,
    *args: str,
    max_restarts: int = 0,
    training: tuple[str, ...] = ("--config", str(CARTPOLE)),
    ranks: int = 2,
) -> subprocess.Popen:
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={ranks}",
        f"--max-restarts={max_restarts}", "--master_addr=127.0.0.1", f"--master_port={free_port()}",
        "-m", "distrl.train", *training, "--run-dir", str(run_dir), *args, "--distributed",
    ]  # fmt: skip
    return subprocess.Popen(cmd, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for(condition, timeout_s: float, proc: subprocess.Popen) -> None:
    """Poll ``condition`` until it holds; if the launch ends first or ``timeout_s`` passes, fail
    with the launch and everything it started killed."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        ended = proc.poll() is not None
        if ended or time.monotonic() > deadline:
            kill_tree(proc.pid)
            stderr = proc.communicate(timeout=60)[1][-3000:]
            pytest.fail(f"launch ended early: {stderr}" if ended else f"timed out: {stderr}")
        time.sleep(0.05)


def run_with_two_sigkills(
    run_dir: Path, *args: str, training: tuple[str, ...] = ("--config", str(CARTPOLE))
) -> None:
    """torchrun --max-restarts=3 with a random rank SIGKILLed twice at random points."""
    proc = start_torchrun(run_dir, "checkpoint.interval_steps=8192", *args, max_restarts=3, training=training)
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
    # Counters go on across the restarts: the whole run's episodes never start again at 0.
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["resumes"] == 2
    episodes = [row["episodes"] for row in rows if "episodes" in row]
    assert episodes == sorted(episodes)


@pytest.mark.slow
def test_chaos_fixed_budget_ends_at_the_same_step_as_an_uninterrupted_run(
    tmp_path: Path, training: list[str]
) -> None:
    total = 90 * STEPS_PER_UPDATE  # two kills at most 56 updates in, each losing at most 16
    run_with_two_sigkills(
        tmp_path, f"--total-steps={total}", "train.stop_return=null", training=tuple(training)
    )
    assert metrics_steps(tmp_path)[-1] == total


@pytest.mark.slow
@pytest.mark.learning(seeds=3)
def test_chaos_run_still_solves_cartpole(tmp_path: Path, seed: int) -> None:
    run_with_two_sigkills(tmp_path, "--total-steps=300000", f"--seed={seed}")
    report = json.loads(distrl("eval", "--checkpoint", str(tmp_path), "--json").stdout)
    assert report["return_mean"] >= 475


@pytest.mark.slow
def test_sigterm_to_one_rank_stops_all_with_a_checkpoint_and_resumes(
    tmp_path: Path, training: list[str]
) -> None:
    total = 16 * STEPS_PER_UPDATE  # the signal lands after 5 updates
    proc = start_torchrun(
        tmp_path,
        f"--total-steps={total}",
        "train.stop_return=null",
        "checkpoint.interval_steps=1000000",
        training=tuple(training),
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
        "train", *training, "--run-dir", str(tmp_path), "--resume", f"--total-steps={total}",
        "train.stop_return=null",
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    steps = metrics_steps(tmp_path)
    assert steps == sorted(set(steps)) and steps[-1] >= total
    # Resumed on 1 rank instead of 2: global sizes keep the global batch the same, and it says so.
    assert steps[-1] - steps[-2] == STEPS_PER_UPDATE
    said = "distrl: going on with 1 rank(s) from a checkpoint of 2 (ranks lost or added since): global sizes"
    assert said in resumed.stderr


@pytest.mark.slow
def test_offline_run_stopped_mid_epoch_by_sigterm_resumes_exactly_on_the_same_ranks(
    tmp_path: Path, logged_data: Path
) -> None:
    """An epoch is 8 updates here; the SIGTERM lands after the 11th (mid-epoch unless the stop
    agreement falls on the 16th), and the resumed run continues that epoch where it stopped: it
    ends with the uninterrupted run's parameters."""
    training = ("--config", str(OFFLINE), "--data", str(logged_data), "algo.batch_size=64",
                "algo.gradient_steps=8", "log.tensorboard=false")  # fmt: skip
    common = (
        f"--total-steps={24 * STEPS_PER_UPDATE}",
        "train.stop_return=null",
        "checkpoint.interval_steps=1000000",
    )
    # The uninterrupted run and the resumed one on forked ranks: torchrun's part is the SIGTERM.
    whole = train_ranks(2, *training, "--run-dir", str(tmp_path / "whole"), *common, timeout=300)
    assert whole.returncode == 0, whole.stderr[-3000:]
    run = tmp_path / "stopped"
    stopped = start_torchrun(run, *common, training=training)
    wait_for(lambda: len(metrics_steps(run)) >= 11, 240, stopped)
    os.kill(children(stopped.pid)[0], signal.SIGTERM)
    stopped.communicate(timeout=300)
    assert 11 <= len(metrics_steps(run)) < 24
    resumed = train_ranks(2, *training, "--run-dir", str(run), *common, "--resume", timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]

    def final(path: Path) -> dict:
        return json.loads((ckpt.resolve_checkpoint(path) / "state.json").read_text())

    assert metrics_steps(run) == list(range(STEPS_PER_UPDATE, 24 * STEPS_PER_UPDATE + 1, STEPS_PER_UPDATE))
    assert final(run)["ranks"][0]["param_sha256"] == final(tmp_path / "whole")["ranks"][0]["param_sha256"]


@pytest.mark.slow
def test_sigterm_single_process_exit_code(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "distrl", "train", "--config", str(CARTPOLE), "--run-dir", str(tmp_path),
           "--total-steps=10000000", "train.stop_return=null"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=clean_env(), stderr=subprocess.PIPE, text=True)
    wait_for(lambda: len(metrics_steps(tmp_path)) >= 3, 120, proc)
    proc.send_signal(signal.SIGUSR1)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == PREEMPTED_EXIT_CODE, stderr
    assert ckpt.resolve_checkpoint(tmp_path).name == ckpt.checkpoint_dir_name(metrics_steps(tmp_path)[-1])


@pytest.fixture(scope="module")
def three_checkpoints_trained(tmp_path_factory: pytest.TempPathFactory, training: list[str]) -> Path:
    """A run of 3072 steps with a checkpoint every 1024, trained once per kind of training: read
    only (``three_checkpoints`` hands each test a copy)."""
    run_dir = tmp_path_factory.mktemp("three-checkpoints")
    result = distrl(
        "train", *training, "--run-dir", str(run_dir), "--total-steps=3072",
        "train.stop_return=null", "checkpoint.interval_steps=1024", "checkpoint.keep_last=5",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert len(ckpt.list_checkpoints(run_dir / "checkpoints")) == 3
    return run_dir


@pytest.fixture
def three_checkpoints(three_checkpoints_trained: Path, tmp_path: Path) -> Path:
    """This test's own copy of ``three_checkpoints_trained``, to damage and resume."""
    return Path(shutil.copytree(three_checkpoints_trained, tmp_path / "run"))


@pytest.mark.parametrize("damage", ["truncate", "flip"])
@pytest.mark.slow
def test_corrupt_newest_checkpoint_falls_back_to_previous(
    three_checkpoints: Path, training: list[str], damage: str
) -> None:
    previous, newest = ckpt.list_checkpoints(three_checkpoints / "checkpoints")[-2:]
    target = newest / "model.safetensors"
    data = bytearray(target.read_bytes())
    if damage == "truncate":
        target.write_bytes(data[: len(data) // 2])
    else:
        data[len(data) // 2] ^= 0xFF
        target.write_bytes(bytes(data))
    result = distrl(
        "train", *training, "--run-dir", str(three_checkpoints), "--resume", "--total-steps=4096",
        "train.stop_return=null",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"skipping checkpoint {newest}" in result.stderr
    assert f"resuming from {previous}" in result.stderr
    assert metrics_steps(three_checkpoints) == list(range(512, 4097, 512))


@pytest.mark.slow
def test_no_valid_checkpoint_is_a_clear_error(three_checkpoints: Path, training: list[str]) -> None:
    for path in ckpt.list_checkpoints(three_checkpoints / "checkpoints"):
        (path / "state.json").write_text("{}")
    result = distrl("train", *training, "--run-dir", str(three_checkpoints), "--resume")
    assert result.returncode == 2
    assert "no valid checkpoint" in result.stderr and "Traceback" not in result.stderr


GRPO_SMALL = (
    "--config", str(GRPO_REVERSE), "algo.num_prompts_per_step=5", "algo.num_generations_per_prompt=3",
    "algo.max_new_tokens=6", "model.transformer={layers: 1, width: 16, heads: 2, context: 16}",
    "task.max_length=4", "train.stop_return=null", "eval.episodes=4", "log.tensorboard=false",
    "log.progress=false", "train.total_steps=900", "checkpoint.interval_steps=150",
)  # fmt: skip
"""GRPO at 15 completions (5 prompts) per update: 60 updates, a checkpoint every 10."""


def ledger(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("ranks", [1, 2])
@pytest.mark.slow
def test_grpo_with_a_rank_killed_trains_every_prompt_once_and_ends_bit_identical(
    tmp_path: Path, ranks: int
) -> None:
    """torchrun's elastic agent restarts the group from the newest checkpoint after a rank is
    SIGKILLed mid-run: the run's ledger holds each update's prompts once, the same as an unbroken
    run's, and the final weights are the unbroken run's to the bit."""
    unbroken = train_ranks(ranks, *GRPO_SMALL, "--run-dir", str(tmp_path / "unbroken"))
    assert unbroken.returncode == 0, unbroken.stderr[-3000:]
    broken = start_torchrun(tmp_path / "broken", max_restarts=2, training=GRPO_SMALL, ranks=ranks)
    wait_for(
        lambda: (tmp_path / "broken" / "ledger.jsonl").is_file() and len(ledger(tmp_path / "broken")) >= 25,
        300,
        broken,
    )
    os.kill(children(broken.pid)[-1], signal.SIGKILL)  # past the checkpoint of update 20
    _, stderr = broken.communicate(timeout=600)
    assert broken.returncode == 0, stderr[-3000:]
    assert (
        json.loads((ckpt.resolve_checkpoint(tmp_path / "broken") / "state.json").read_text())["launch_index"]
        == 1
    )

    rows = ledger(tmp_path / "broken")
    assert [row["update"] for row in rows] == list(range(1, 61))
    trained = [index for row in rows for index in row["trained"]]
    assert len(trained) == len(set(trained)) == 300  # each prompt once
    assert rows == ledger(tmp_path / "unbroken")
    weights = [
        (ckpt.resolve_checkpoint(tmp_path / run) / "model.safetensors").read_bytes()
        for run in ("unbroken", "broken")
    ]
    assert weights[0] == weights[1]


@pytest.mark.slow
def test_ranks_whose_torchrun_agent_dies_save_a_checkpoint_and_stop(tmp_path: Path) -> None:
    """torchrun's agent SIGKILLed (the OOM killer's pick, say) sends its ranks nothing: they
    notice their parent gone, stop as if preempted (a checkpoint at their last update, exit code
    75) instead of training on as orphans beside the next launch."""
    proc = start_torchrun(tmp_path, "--total-steps=100000000", "train.stop_return=null")
    wait_for(lambda: len(metrics_steps(tmp_path)) >= 3, 240, proc)
    ranks = children(proc.pid)
    proc.kill()
    _, stderr = proc.communicate(timeout=120)  # its pipe closes as both ranks exit
    # A rank's pipe closes a moment before the kernel lets it go: give the exits a few seconds.
    deadline = time.monotonic() + 30
    while running := [pid for pid in ranks if _state(pid) != "Z"]:
        assert time.monotonic() < deadline, f"ranks {running} still running after their launcher died"
        time.sleep(0.1)
    # No signal was sent: the rank that noticed first stopped both (the other may say "another rank").
    noticed = "preempted by the death of its launcher (torchrun's agent) at step"
    assert noticed in stderr or "preempted by a signal on another rank" in stderr, stderr[-3000:]
    assert ckpt.resolve_checkpoint(tmp_path).name == ckpt.checkpoint_dir_name(metrics_steps(tmp_path)[-1])


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"
