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


def test_the_last_line_says_why_the_run_stopped(tmp_path: Path) -> None:
    solved = distrl("train", "--config", str(CARTPOLE), "--run-dir", str(tmp_path / "solved"))
    assert solved.returncode == 0, solved.stderr[-3000:]
    last = solved.stdout.strip().splitlines()[-1]
    assert "; stopped: the evaluation check passed (mean return " in last, last
    assert ">= train.stop_return=495); recent training episode return " in last, last
    budget = distrl(
        "train", "--config", str(CARTPOLE), "--run-dir", str(tmp_path / "b"), "--total-steps", "512"
    )
    assert "trained 512 env steps on 1 rank(s) in " in budget.stdout
    assert "; stopped: the step budget (train.total_steps=512) was reached; " in budget.stdout


def test_pendulum_reaches_minus_400(tmp_path: Path) -> None:
    assert train_and_eval(REPO / "configs" / "pendulum_ppo.yaml", tmp_path) >= -400


def test_cartpole_dqn_single_process_solves(tmp_path: Path) -> None:
    assert train_and_eval(CARTPOLE_DQN, tmp_path) >= 475
