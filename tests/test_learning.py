"""Learning with the shipped configs, judged by deterministic evaluation (10 episodes): claims over
seeds (``make learn``; ``make test`` runs each kept seed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import (
    CARTPOLE,
    CARTPOLE_A2C,
    CARTPOLE_DQN,
    GRPO_REVERSE,
    PENDULUM_SAC,
    PENDULUM_TD3,
    REPO,
    distrl,
    train_ranks,
)

pytestmark = pytest.mark.slow


def train_and_eval(config: Path, run_dir: Path, *args: str) -> float:
    result = distrl("train", "--config", str(config), "--run-dir", str(run_dir), *args)
    assert result.returncode == 0, result.stderr[-3000:]
    return evaluate(run_dir)


def evaluate(run_dir: Path) -> float:
    report = json.loads(distrl("eval", "--checkpoint", str(run_dir), "--json").stdout)
    assert report["episodes"] == 10
    return report["return_mean"]


@pytest.mark.learning(seeds=10, kept=1)
def test_cartpole_single_process_solves_and_says_so_last(tmp_path: Path, seed: int) -> None:
    solved = distrl("train", "--config", str(CARTPOLE), "--run-dir", str(tmp_path), "--seed", str(seed))
    assert solved.returncode == 0, solved.stderr[-3000:]
    last = solved.stdout.strip().splitlines()[-1]
    assert "; stopped: the evaluation check passed (mean return " in last, last
    assert ">= train.stop_return=495); recent training episode return " in last, last
    assert evaluate(tmp_path) >= 475


def test_the_last_line_names_the_step_budget_in_whole_updates(tmp_path: Path) -> None:
    budget = distrl("train", "--config", str(CARTPOLE), "--run-dir", str(tmp_path), "--total-steps", "600")
    assert budget.returncode == 0, budget.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["global_step"] for row in rows] == [512, 1024]  # updates of 32 envs x 16 steps
    # The progress counts to where the run ends, not past its budget.
    assert budget.stdout.splitlines()[-2].startswith("distrl: 1,024/1,024 (100%)"), budget.stdout
    assert "trained 1024 env steps on 1 rank(s) in " in budget.stdout
    assert (
        "; stopped: the step budget (train.total_steps=600, in whole iterations of 512 env steps) was "
        "reached; " in budget.stdout
    )


@pytest.mark.learning(seeds=3)
def test_pendulum_reaches_minus_400(tmp_path: Path, seed: int) -> None:
    # Stopped once a check (confirmed on 20 more episodes) reaches -350, well before the budget.
    config = REPO / "configs" / "pendulum_ppo.yaml"
    assert train_and_eval(config, tmp_path, "train.stop_return=-350", "--seed", str(seed)) >= -400


@pytest.mark.learning(seeds=10)  # DQN's check in make test: learning from uint8 frames (20 s, not 60)
def test_cartpole_dqn_single_process_solves(tmp_path: Path, seed: int) -> None:
    assert train_and_eval(CARTPOLE_DQN, tmp_path, "--seed", str(seed)) >= 475


@pytest.mark.learning(seeds=10, kept=1)
def test_cartpole_a2c_single_process_solves(tmp_path: Path, seed: int) -> None:
    assert train_and_eval(CARTPOLE_A2C, tmp_path, "--seed", str(seed)) >= 475


@pytest.mark.learning(seeds=10)
def test_cartpole_a2c_two_ranks_solve(tmp_path: Path, seed: int) -> None:
    """Two ranks, each stepping half of the config's envs, their gradients averaged."""
    result = train_ranks(2, "--config", str(CARTPOLE_A2C), "--run-dir", str(tmp_path), "--seed", str(seed))
    assert result.returncode == 0, result.stderr[-3000:]
    assert evaluate(tmp_path) >= 475


@pytest.mark.learning(seeds=3)
def test_pendulum_sac_reaches_minus_200(tmp_path: Path, seed: int) -> None:
    # Stopped once a check (confirmed on more episodes) reaches -200, within the config's 20,000 steps.
    assert train_and_eval(PENDULUM_SAC, tmp_path, "--seed", str(seed)) >= -250


@pytest.mark.learning(seeds=3)
def test_pendulum_td3_reaches_minus_200(tmp_path: Path, seed: int) -> None:
    # SB3's TD3 defaults; stopped once a check (confirmed on more episodes) reaches -200.
    assert train_and_eval(PENDULUM_TD3, tmp_path, "--seed", str(seed)) >= -250


@pytest.mark.learning(seeds=10, kept=1)
def test_grpo_reverses_digit_strings_on_held_out_prompts(tmp_path: Path, seed: int) -> None:
    """The GRPO demo: a small transformer from random weights stops by its held-out check (exact
    match 0.95 on 128 prompts never trained on), within the config's budget."""
    result = distrl("train", "--config", str(GRPO_REVERSE), "--run-dir", str(tmp_path), "--seed", str(seed))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["stop_check_return"] >= 0.95, rows[-1]


@pytest.mark.learning(seeds=5)
@pytest.mark.parametrize("task", ["sort", "increment", "count", "max"])
def test_grpo_learns_each_shipped_task_on_held_out_prompts(tmp_path: Path, seed: int, task: str) -> None:
    """Tasks of other shapes than the demo's (reordering, copying with a rule, a one-character
    answer read off the whole prompt), each with its shipped config (``configs/grpo_<task>.yaml``):
    stopped by the held-out check (exact match 0.95 on 128 prompts never trained on) within the
    budget."""
    config = REPO / "configs" / f"grpo_{task}.yaml"
    result = distrl("train", "--config", str(config), "--run-dir", str(tmp_path), "--seed", str(seed))
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["stop_check_return"] >= 0.95, rows[-1]
