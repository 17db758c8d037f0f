"""The tests ``tests/test_clean_stop.py`` runs in a pytest session of its own and stops with a
signal mid-way (not collected by ``make test``: the name does not start with ``test_``; skipped
unless ``DISTRL_CLEAN_STOP_DIR`` is set).

Each keeps several kinds of process busy at once, every one training until stopped, its run dir
under ``DISTRL_CLEAN_STOP_DIR``: a process forked by the preloaded CLI server (a session of its
own), torchrun with its two ranks, an in-process ``TrainingLoop.run`` (its preemption handler
takes SIGTERM) and the session's Ray head. The last test runs only if the session goes on after
the signal."""

from __future__ import annotations

import faulthandler
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from distrl.comm import TorchComm
from distrl.config.run import load_config
from distrl.entry import build_training
from tests.helpers import CARTPOLE, distrl, torchrun_train

pytestmark = pytest.mark.skipif(
    "DISTRL_CLEAN_STOP_DIR" not in os.environ, reason="run by tests/test_clean_stop.py"
)
if "DISTRL_CLEAN_STOP_DIR" in os.environ:
    # SIGUSR2 writes every thread's stack to stacks.txt: what a session that does not stop is doing.
    _STACKS = (Path(os.environ["DISTRL_CLEAN_STOP_DIR"]) / "stacks.txt").open("w")
    faulthandler.register(signal.SIGUSR2, file=_STACKS, all_threads=True)
UNTIL_STOPPED = [
    "train.total_steps=100000000", "train.stop_return=null", "log.tensorboard=false", "log.progress=false",
    "env.num_envs=4", "algo.rollout_steps=32", "algo.minibatch_size=64",
]  # fmt: skip
"""CartPole PPO that trains until it is stopped, a row every 128 steps."""


def run_dir(name: str) -> Path:
    return Path(os.environ["DISTRL_CLEAN_STOP_DIR"]) / name


def in_background(target: Callable[[], object]) -> None:
    threading.Thread(target=target, daemon=True).start()


def preloaded_run() -> None:
    distrl("train", "--config", str(CARTPOLE), "--run-dir", str(run_dir("preloaded")), *UNTIL_STOPPED)


def torchrun_run() -> None:
    torchrun_train(2, "--config", str(CARTPOLE), "--run-dir", str(run_dir("torchrun")), *UNTIL_STOPPED)


def test_stopped_while_training_in_process(ray_head: str) -> None:
    in_background(preloaded_run)
    in_background(torchrun_run)
    cfg = load_config(CARTPOLE, UNTIL_STOPPED)
    build_training(cfg, TorchComm(), torch.device("cpu"), run_dir("in-process")).run()


def test_stopped_while_a_preloaded_run_trains() -> None:
    in_background(torchrun_run)
    preloaded_run()


def test_reached_only_by_a_session_that_goes_on() -> None:
    time.sleep(600)
