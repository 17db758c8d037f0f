"""Resuming continues the same run: global step, learning-rate schedule, optimiser, normaliser."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import yaml

from distrl.comm import TorchComm
from distrl.config.run import load_config
from distrl.entry import build_training
from distrl.io import checkpoint as ckpt
from tests.helpers import CARTPOLE, distrl

OVERRIDES = [
    "train.total_steps=4096",
    "env.num_envs=4",
    "algo.rollout_steps=64",
    "normalize.observations=true",
    "train.stop_return=null",
    "log.tensorboard=false",
    "checkpoint.interval_steps=1024",
    "checkpoint.keep_last=10",
]


def read_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_resume_matches_the_uninterrupted_schedule(tmp_path: Path) -> None:
    cfg = load_config(CARTPOLE, OVERRIDES)
    full = build_training(cfg, TorchComm(), torch.device("cpu"), tmp_path / "full")
    full.run()
    midpoint = tmp_path / "full" / "checkpoints" / ckpt.checkpoint_dir_name(2048)
    files = ckpt.load_checkpoint(midpoint)

    resumed = build_training(cfg, TorchComm(), torch.device("cpu"), tmp_path / "resumed", files)
    saved_model = ckpt.tensors_from_bytes(files["model.safetensors"])
    assert (resumed.global_step, resumed.update_index) == (2048, 8)
    obs_rms = resumed.runner.obs_rms
    torch.testing.assert_close(obs_rms.mean, saved_model["obs_rms.mean"], rtol=0, atol=0)
    torch.testing.assert_close(obs_rms.count, saved_model["obs_rms.count"], rtol=0, atol=0)
    adam_state = resumed.runner.algo.optimizer.state_dict()["state"]
    saved_adam = ckpt.tensors_from_bytes(files["optimizer.safetensors"])
    torch.testing.assert_close(adam_state[0]["exp_avg"], saved_adam["policy.0.exp_avg"], rtol=0, atol=0)
    resumed.run()

    full_rows = {r["update"]: r for r in read_rows(tmp_path / "full")}
    resumed_rows = read_rows(tmp_path / "resumed")
    assert [r["update"] for r in resumed_rows] == list(range(9, 17))
    for row in resumed_rows:
        assert row["global_step"] == full_rows[row["update"]]["global_step"]
        assert row["learning_rate"] == full_rows[row["update"]]["learning_rate"]
    # Same number of observations merged into the normaliser as without the interruption.
    assert float(resumed.runner.obs_rms.count) == float(full.runner.obs_rms.count)


def test_cli_resume_appends_without_duplicate_updates(tmp_path: Path) -> None:
    common = ["train", "--config", str(CARTPOLE), "--run-dir", str(tmp_path), *OVERRIDES]
    assert distrl(*common, "--total-steps", "2048").returncode == 0
    second = distrl(*common, "--total-steps", "4096", "--resume")
    assert second.returncode == 0, second.stderr
    steps = [r["global_step"] for r in read_rows(tmp_path)]
    assert steps == sorted(set(steps)) and steps[-1] == 4096 and steps[0] == 256
    state = json.loads((ckpt.resolve_checkpoint(tmp_path) / "state.json").read_text())
    assert state["global_step"] == 4096 and state["launch_index"] == 1
    assert yaml.safe_load((tmp_path / "config.yaml").read_text())["train"]["total_steps"] == 4096
    assert f"resuming from {tmp_path / 'checkpoints' / ckpt.checkpoint_dir_name(2048)}" in second.stderr
