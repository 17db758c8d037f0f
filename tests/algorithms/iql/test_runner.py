"""Offline IQL from logged continuous actions (``distrl collect`` of Pendulum-v1): 2 ranks sharing
the dataset end with identical networks, and the final policy is evaluated and exported; DQN and
IQL each refuse the other's actions in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distrl.io import checkpoint as ckpt
from tests.eval.reference import reference_returns
from tests.helpers import OFFLINE, REPO, distrl, train_ranks
from tests.io.test_export import assert_file_acts_like_checkpoint
from tests.runners.test_sharded import assert_sharded_takes_the_replicated_steps

PENDULUM_IQL = REPO / "configs" / "pendulum_iql.yaml"


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data") / "pendulum"
    result = distrl("collect", "--env", "Pendulum-v1", "--steps", "3000", "--rows-per-file", "1000",
                    "--out", str(out))  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out


@pytest.mark.slow
def test_two_ranks_train_identical_networks_and_export_the_policy(pendulum: Path, tmp_path: Path) -> None:
    result = train_ranks(
        2, "--config", str(PENDULUM_IQL), "--data", str(pendulum), "--run-dir", str(tmp_path / "run"),
        "algo.batch_size=64", "algo.gradient_steps=47", "--total-steps", "6000", "train.stop_return=null",
        "log.tensorboard=false", f"output.path={tmp_path / 'model' / 'policy.onnx'}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    # 3000 rows in 3 files: rank 0 holds 2000, rank 1 1000; 32 each per step makes an epoch of
    # ceil(2000 / 32) = 63 steps. Iteration 1 (47 steps): rank 0 1504 rows, rank 1 its 1000 (its
    # 32nd batch holds 8) = 2504. Iteration 2: rank 0's last 496, then 31 steps of epoch 1 on both.
    assert [r["global_step"] for r in rows][:2] == [2504, 2504 + 496 + 2 * 31 * 32]
    assert [r["epoch"] for r in rows][:2] == [0, 1]
    assert all(r["skipped_steps"] == 0 for r in rows if "skipped_steps" in r)
    state = json.loads((ckpt.resolve_checkpoint(tmp_path / "run") / "state.json").read_text())
    assert state["algorithm"] == "iql"
    assert state["ranks"][0]["param_sha256"] == state["ranks"][1]["param_sha256"]
    report = json.loads(
        distrl("eval", "--checkpoint", str(tmp_path / "run"), "--episodes", "2", "--json").stdout
    )
    # The final checkpoint's policy, its episodes played again apart from `distrl eval`.
    assert report["episodes"] == 2 and report["global_step"] == rows[-1]["global_step"]
    assert report["returns"] == reference_returns(tmp_path / "run", 2)
    assert_file_acts_like_checkpoint(tmp_path / "model" / "policy.onnx", tmp_path / "run")


@pytest.mark.slow
def test_dqn_and_iql_refuse_each_others_actions_in_one_line(pendulum: Path, tmp_path: Path) -> None:
    cartpole = tmp_path / "cartpole"
    assert distrl("collect", "--env", "CartPole-v1", "--steps", "100", "--out", str(cartpole)).returncode == 0
    for config, data, message in [
        (OFFLINE, pendulum, "its actions are continuous (Box(-2.0, 2.0, (1,), float32)); dqn needs discrete"),
        (PENDULUM_IQL, cartpole, "iql learns from continuous actions"),
    ]:
        result = distrl(
            "train", "--config", str(config), "--data", str(data), "--run-dir", str(tmp_path / "run")
        )
        assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert message in result.stderr


@pytest.mark.slow
def test_sharded_iql_takes_the_replicated_steps(pendulum: Path, tmp_path: Path) -> None:
    """Its value, twin critics, their target and actor sharded over 2 ranks."""
    run = [
        "--config", str(PENDULUM_IQL), "--data", str(pendulum), "algo.batch_size=64", "algo.gradient_steps=8",
        "--total-steps", "1024", "train.stop_return=null", "log.tensorboard=false", "log.progress=false",
    ]  # fmt: skip
    assert_sharded_takes_the_replicated_steps(tmp_path, run, "critic", "critic_target")
