"""A run dir on rank 0: what a fresh start, an --overwrite and a restart do to what it holds."""

from __future__ import annotations

from pathlib import Path

import torch

from distrl.comm import TorchComm
from distrl.config.run import load_config
from distrl.entry import build_training
from distrl.io import checkpoint as ckpt
from distrl.io.run_dir import prepare_run_dir
from tests.helpers import CARTPOLE

TINY = ["train.total_steps=512", "env.num_envs=4", "algo.rollout_steps=64", "train.stop_return=null"]


def _trained_run(run_dir: Path):
    cfg = load_config(CARTPOLE, [*TINY, "log.tensorboard=false"])
    build_training(cfg, TorchComm(), torch.device("cpu"), run_dir).run()
    return cfg


def test_a_restart_of_an_overwrite_run_resumes_and_keeps_its_checkpoints(tmp_path: Path) -> None:
    """torchrun restarts a failed process with the command line it was first given: --overwrite
    then must not wipe the checkpoints the restart resumes from."""
    cfg = _trained_run(tmp_path)
    before = sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*"))
    chosen = prepare_run_dir(tmp_path, cfg, resume=True, must_resume=False, overwrite=True)
    assert chosen is not None and chosen[0] == ckpt.list_checkpoints(tmp_path / "checkpoints")[-1]
    assert sorted(path.relative_to(tmp_path) for path in tmp_path.rglob("*")) == before


def test_overwrite_on_a_fresh_start_replaces_the_run(tmp_path: Path) -> None:
    cfg = _trained_run(tmp_path)
    assert prepare_run_dir(tmp_path, cfg, resume=False, must_resume=False, overwrite=True) is None
    assert list(tmp_path.iterdir()) == []
