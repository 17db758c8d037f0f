"""Runs in one process that collected runs are compared with, bit for bit: collector processes
beside a rank (tests/collect/test_processes.py) and Ray's env workers beside a learner
(tests/ray/test_env_workers.py). Each is trained once per test session (by one of pytest-xdist's
workers), on first use (``reference_run``, registered in conftest.py)."""

from __future__ import annotations

import fcntl
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers import CARTPOLE, CARTPOLE_DQN, CARTPOLE_MEMORY, PENDULUM_SAC, distrl
from tests.ray_cluster import metrics_rows

QUIET = ["train.stop_return=null", "log.tensorboard=false", "log.progress=false"]
SMALL = ["env.num_envs=8", "algo.rollout_steps=32", "algo.minibatch_size=64", "train.total_steps=1024"]


@dataclass(frozen=True)
class ReferenceRun:
    """A run's config and overrides (its budget); the collected runs add their collectors."""

    config: Path
    overrides: tuple[str, ...]
    collectors: int = 2
    """The collector processes or env workers that share its envs in the runs compared with it."""


REFERENCE_RUNS = {
    "ppo": ReferenceRun(CARTPOLE, ("train.total_steps=4096",)),
    # Collectors carry their envs' LSTM states from segment to segment; episodes of 20 steps.
    "ppo-lstm": ReferenceRun(CARTPOLE_MEMORY, ("env.max_episode_steps=20", "train.total_steps=1024")),
    # uint8 frames through shared memory or Ray's object store, read by a CNN on the learner.
    "ppo-images": ReferenceRun(CARTPOLE, ("--env", "tests.envs.toy:BrightnessEnv", *SMALL)),
    # Dict observations packed into one tensor (the space travels to the learner), under APPO.
    "appo-dict": ReferenceRun(CARTPOLE, ("algo.name=appo", "--env", "tests.envs.toy:DictCueEnv",
                                         "env.obs_keys=[cue,noise,flags]", *SMALL)),
    "dqn": ReferenceRun(CARTPOLE_DQN, ("train.total_steps=2048", "algo.learning_starts=512")),
    # One collector for both envs: continuous actions computed for fewer rows at a time round
    # differently in the last bit (CPU kernels vary with the batch), so only the same rows match.
    "sac": ReferenceRun(PENDULUM_SAC, ("env.num_envs=2", "algo.rollout_steps=8", "algo.gradient_steps=4",
                                       "algo.learning_starts=64", "algo.batch_size=32",
                                       "train.total_steps=256"), collectors=1),
}  # fmt: skip
"""Each reference run by name (the tests' ids)."""


def train(run_dir: Path, config: Path, *overrides: str) -> list[dict]:
    """``distrl train`` in one process, quiet and to its budget (``train.stop_return=null``); its
    metrics rows."""
    result = distrl("train", "--config", str(config), "--run-dir", str(run_dir), *QUIET, *overrides)
    assert result.returncode == 0, result.stderr[-3000:]
    return metrics_rows(run_dir)


@pytest.fixture(scope="session")
def reference_run(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The run dir of ``REFERENCE_RUNS[name]``, trained on first use and shared by the session's
    tests: read it, never write to it. Under pytest-xdist every worker's tests share it too (in
    the temp dir the workers' own are in): the first to need it trains it, the others wait."""
    shared = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = shared.parent

    def run_dir(name: str) -> Path:
        path, trained = shared / f"reference-{name}", shared / f"reference-{name}.trained"
        with (shared / f"reference-{name}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed
            if not trained.exists():
                shutil.rmtree(path, ignore_errors=True)  # what a failed try left
                run = REFERENCE_RUNS[name]
                train(path, run.config, *run.overrides)
                trained.touch()
        return path

    return run_dir
