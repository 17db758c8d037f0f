"""Learning with the shipped configs, judged by deterministic evaluation (10 episodes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import CARTPOLE, CARTPOLE_DQN, REPO, distrl

pytestmark = pytest.mark.slow


def train_and_eval(config: Path, run_dir: Path, *args: str) -> float:
    result = distrl("train", "--config", str(config), "--run-dir", str(run_dir), *args)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(distrl("eval", "--checkpoint", str(run_dir), "--json").stdout)
    assert report["episodes"] == 10
    return report["return_mean"]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_cartpole_single_process_solves(tmp_path: Path, seed: int) -> None:
    assert train_and_eval(CARTPOLE, tmp_path, "--seed", str(seed)) >= 475


def test_pendulum_reaches_minus_400(tmp_path: Path) -> None:
    assert train_and_eval(REPO / "configs" / "pendulum_ppo.yaml", tmp_path) >= -400


def test_cartpole_dqn_single_process_solves(tmp_path: Path) -> None:
    assert train_and_eval(CARTPOLE_DQN, tmp_path) >= 475
