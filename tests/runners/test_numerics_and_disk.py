"""Non-finite numbers are skipped on every rank; a full or read-only disk is a clear error."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from distrl.io import checkpoint as ckpt
from tests.helpers import CARTPOLE, distrl, torchrun_train


@pytest.mark.slow
def test_nan_observations_skip_updates_then_stop_with_last_good_checkpoint(tmp_path: Path) -> None:
    args = [
        "--env", "tests.envs.toy:BrokenSensorEnv", "env.kwargs={healthy_steps: 600}",
        "env.max_episode_steps=50", "--num-envs", "8", "algo.rollout_steps=64", "algo.num_minibatches=4",
        "train.max_bad_updates=3", "train.stop_return=null", "checkpoint.interval_steps=256",
        "--total-steps", "100000", "--run-dir", str(tmp_path),
    ]  # fmt: skip
    result = torchrun_train(2, *args)
    assert result.returncode != 0
    assert "3 updates in a row had a non-finite loss, gradient or observation" in result.stderr
    # One line per rank from distrl; the only traceback is torchrun's own report of the exit code.
    assert "distrl/" not in result.stderr and "exitcode  : 2" in result.stderr
    # Each env is healthy for 600 steps: 9 full rollouts of 64 steps (8 envs: 512 global steps per update),
    # then NaN. The newest checkpoint is the last good update's, and it loads with finite weights.
    good = ckpt.list_checkpoints(tmp_path / "checkpoints")[-1]
    assert good.name == ckpt.checkpoint_dir_name(9 * 512)
    files = ckpt.load_checkpoint(good)
    state = ckpt.tensors_from_bytes(files["model.safetensors"])
    assert all(t.isfinite().all() for t in state.values())


def _mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
        check=False,
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        print(f"cannot mount a tmpfs here ({mounted.stderr.strip()}): skipping")
        pytest.skip(f"mounting a small tmpfs needs root: {mounted.stderr.strip()}")


@pytest.fixture
def small_checkpoint_disk(tmp_path: Path) -> Iterator[Path]:
    """run dir whose checkpoints/ is a 200 KiB tmpfs: room for one CartPole checkpoint."""
    _mount_tmpfs(tmp_path / "run" / "checkpoints", "200k")
    yield tmp_path / "run"
    subprocess.run(["umount", str(tmp_path / "run" / "checkpoints")], check=False)


@pytest.mark.slow
def test_full_disk_is_a_clear_error_and_keeps_the_previous_checkpoint(small_checkpoint_disk: Path) -> None:
    result = distrl(
        "train", "--config", str(CARTPOLE), "--run-dir", str(small_checkpoint_disk), "--total-steps=2048",
        "train.stop_return=null", "checkpoint.interval_steps=1024", "log.tensorboard=false",
    )  # fmt: skip
    assert result.returncode == 2
    assert "No space left on device; earlier checkpoints are intact" in result.stderr
    assert "Traceback" not in result.stderr
    checkpoints = ckpt.list_checkpoints(small_checkpoint_disk / "checkpoints")
    assert [c.name for c in checkpoints] == [ckpt.checkpoint_dir_name(1024)]
    ckpt.load_checkpoint(checkpoints[0])  # verifies every checksum
    assert not [p for p in (small_checkpoint_disk / "checkpoints").iterdir() if p.name.startswith(".")]


@pytest.mark.slow
def test_read_only_checkpoint_dir_is_a_clear_error(small_checkpoint_disk: Path) -> None:
    common = [
        "train", "--config", str(CARTPOLE), "--run-dir", str(small_checkpoint_disk),
        "train.stop_return=null", "log.tensorboard=false",
    ]  # fmt: skip
    assert distrl(*common, "--total-steps=1024").returncode == 0
    checkpoints = small_checkpoint_disk / "checkpoints"
    subprocess.run(["mount", "-o", "remount,ro", str(checkpoints)], check=True)
    result = distrl(*common, "--total-steps=2048", "--resume")
    assert result.returncode == 2
    assert "Read-only file system; earlier checkpoints are intact" in result.stderr
    assert "Traceback" not in result.stderr
    ckpt.load_checkpoint(ckpt.list_checkpoints(checkpoints)[-1])
