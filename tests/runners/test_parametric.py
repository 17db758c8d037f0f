"""Parametric DQN (ReAgent): rows with candidate sets of varying size, scored by (state, action
features) pairs; it nears the best achievable reward of a synthetic recommendation task, on 1
and 2 ranks alike, and its exported file picks the same candidates."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch

from distrl.data.recommendation import draw_users, policy_rewards, write_dataset
from distrl.eval.policy import load_policy
from distrl.io import checkpoint as ckpt
from tests.helpers import REPO, distrl, train_ranks

PARAMETRIC = REPO / "configs" / "recommendation_parametric_dqn.yaml"
TRAIN = ["--config", str(PARAMETRIC), "--total-steps", "200000", "log.tensorboard=false"]


@pytest.fixture(scope="module")
def recommendations(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("recommendation") / "data"
    write_dataset(out, rows=10_000, rows_per_file=2_500, seed=0)
    return out


@pytest.fixture(scope="module")
def trained(recommendations: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run = tmp_path_factory.mktemp("parametric") / "run"
    result = distrl("train", *TRAIN, "--data", str(recommendations), "--run-dir", str(run))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "no counterfactual evaluation during training: it needs ReAgent-format data" in result.stderr
    return run


def share_of_best(run: Path) -> float:
    """How far the policy gets from the logger's mean reward to the best achievable (1: all the way)."""
    rewards = policy_rewards(load_policy(run).policy, rows=5_000, seed=99)
    return (rewards["policy"] - rewards["logger"]) / (rewards["best"] - rewards["logger"])


@pytest.mark.slow
@pytest.mark.learning(seeds=5)
def test_parametric_dqn_gets_close_to_the_best_achievable_reward(
    recommendations: Path, tmp_path: Path, seed: int
) -> None:
    result = distrl(
        "train", *TRAIN, "--seed", str(seed), "--data", str(recommendations), "--run-dir", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert share_of_best(tmp_path) >= 0.95


@pytest.mark.slow
@pytest.mark.learning(seeds=10, kept=1)
def test_two_ranks_learn_it_as_well(recommendations: Path, tmp_path: Path, seed: int) -> None:
    result = train_ranks(
        2, *TRAIN, "--seed", str(seed), "--data", str(recommendations), "--run-dir", str(tmp_path)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    state = json.loads((ckpt.resolve_checkpoint(tmp_path) / "state.json").read_text())
    assert state["ranks"][0]["param_sha256"] == state["ranks"][1]["param_sha256"]
    assert share_of_best(tmp_path) >= 0.95


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
@pytest.mark.slow
def test_exported_file_picks_the_same_candidates(trained: Path, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / ("policy.onnx" if fmt == "onnx" else "policy.pt")
    result = distrl("export", "--checkpoint", str(trained), "--format", fmt, "--out", str(out))
    assert result.returncode == 0, result.stderr
    task = draw_users(64, np.random.default_rng(5))  # 8 candidate slots, each row 2 to 8 real
    inputs = (torch.as_tensor(task.users), torch.as_tensor(task.items), torch.as_tensor(task.mask))
    with torch.no_grad():
        expected = load_policy(trained).policy(*inputs).numpy()
    if fmt == "onnx":
        feed = dict(zip(("obs", "candidates", "candidate_mask"), (x.numpy() for x in inputs), strict=True))
        chosen = onnxruntime.InferenceSession(str(out)).run(None, feed)[0]
    else:
        chosen = torch.jit.load(str(out))(*inputs).numpy()
    np.testing.assert_array_equal(chosen, expected)
    assert task.mask[np.arange(64), chosen].all()  # only real candidates are ever picked


def test_eval_of_a_parametric_policy_is_one_line(trained: Path) -> None:
    result = distrl("eval", "--checkpoint", str(trained))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "parametric-action policy" in result.stderr


@pytest.mark.slow
def test_stop_return_with_parametric_data_is_one_line(recommendations: Path, tmp_path: Path) -> None:
    result = distrl(
        "train", *TRAIN, "--data", str(recommendations), "--run-dir", str(tmp_path), "train.stop_return=400"
    )
    assert result.returncode == 2 and "set train.stop_return=null" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
