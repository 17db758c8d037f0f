"""The training loop leaves the process as it found it: the preemption handlers it installs for
a run are taken down when the run ends, or fails to start, so an in-process run (a test, a
notebook) does not leave SIGTERM ignored."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch

from distrl.comm import TorchComm
from distrl.config.run import load_config
from distrl.entry import build_training
from tests.helpers import CARTPOLE


def test_an_in_process_run_restores_the_signal_handlers(tmp_path: Path) -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    cfg = load_config(
        CARTPOLE,
        ["train.total_steps=256", "env.num_envs=4", "algo.rollout_steps=64", "log.tensorboard=false"],
    )
    loop = build_training(cfg, TorchComm(), torch.device("cpu"), tmp_path)
    loop.run()
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_a_run_that_fails_to_start_restores_the_signal_handlers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    cfg = load_config(CARTPOLE, ["env.num_envs=4", "algo.rollout_steps=64", "log.tensorboard=false"])
    loop = build_training(cfg, TorchComm(), torch.device("cpu"), tmp_path)

    def fail(fresh: bool) -> None:
        raise RuntimeError("the envs did not start")

    monkeypatch.setattr(loop.runner, "start", fail)
    with pytest.raises(RuntimeError, match="the envs did not start"):
        loop.run()
    assert {sig: signal.getsignal(sig) for sig in before} == before
