"""Runs with 2 ranks on the CPU (gloo): under real torchrun, and the algorithms' ranks forked as
torchrun starts its workers (``train_ranks``), where what is tested is what the ranks do together."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distrl.io import checkpoint as ckpt
from tests.eval.reference import reference_returns
from tests.helpers import (
    CARTPOLE,
    CARTPOLE_A2C,
    CARTPOLE_DQN,
    PENDULUM_SAC,
    distrl,
    torchrun_train,
    train_ranks,
)


@pytest.mark.slow
def test_two_rank_torchrun_ends_with_identical_parameters(tmp_path: Path) -> None:
    result = torchrun_train(
        2,
        "--config",
        str(CARTPOLE),
        "--run-dir",
        str(tmp_path),
        "--total-steps",
        "8192",
        "train.stop_return=null",
        "checkpoint.interval_steps=2048",
        "checkpoint.keep_last=2",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    checkpoints = ckpt.list_checkpoints(tmp_path / "checkpoints")
    assert [c.name for c in checkpoints] == [ckpt.checkpoint_dir_name(s) for s in (6144, 8192)]
    state = json.loads((checkpoints[-1] / "state.json").read_text())
    assert state["world_size"] == 2 and len(state["ranks"]) == 2
    # Each rank hashed its own parameters; the digests must agree bit for bit.
    assert state["ranks"][0]["param_sha256"] == state["ranks"][1]["param_sha256"]
    assert state["ranks"][0]["torch_rng"] != state["ranks"][1]["torch_rng"]  # distinct seeds
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["global_step"] == 8192
    assert rows[0]["global_step"] == 32 * 16  # the config's global batch, shared by both ranks
    assert all(r["rollout_fraction"] == 1.0 for r in rows)  # no straggler cut-off unless asked


@pytest.mark.slow
@pytest.mark.learning(seeds=3)
def test_two_rank_cartpole_solves(tmp_path: Path, seed: int) -> None:
    result = torchrun_train(2, "--config", str(CARTPOLE), "--run-dir", str(tmp_path), "--seed", str(seed))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(distrl("eval", "--checkpoint", str(tmp_path), "--json").stdout)
    assert report["episodes"] == 10 and report["return_mean"] >= 475


@pytest.mark.parametrize(
    ("config", "budget"),
    [
        (CARTPOLE_A2C, ["train.total_steps=2000", "train.stop_return=null"]),
        (CARTPOLE_DQN, ["train.total_steps=2048", "algo.learning_starts=512", "train.stop_return=null"]),
        (PENDULUM_SAC, ["env.num_envs=2", "algo.rollout_steps=4", "algo.learning_starts=64",
                        "train.total_steps=400", "train.stop_return=null"]),
    ],
    ids=["a2c", "dqn", "sac"],
)  # fmt: skip
@pytest.mark.slow
def test_two_rank_a2c_dqn_and_sac_end_with_identical_parameters(
    tmp_path: Path, config: Path, budget: list[str]
) -> None:
    result = train_ranks(2, "--config", str(config), "--run-dir", str(tmp_path), *budget)
    assert result.returncode == 0, result.stderr[-3000:]
    state = json.loads((ckpt.resolve_checkpoint(tmp_path) / "state.json").read_text())
    assert state["ranks"][0]["param_sha256"] == state["ranks"][1]["param_sha256"]
    report = json.loads(distrl("eval", "--checkpoint", str(tmp_path), "--json", "--episodes", "2").stdout)
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert report["episodes"] == 2 and report["global_step"] == rows[-1]["global_step"]
    # The 2 ranks' final policy, its episodes played again apart from `distrl eval`.
    assert report["returns"] == reference_returns(tmp_path, 2)


@pytest.mark.slow
def test_dry_run_prints_every_rank_and_builds_nothing(tmp_path: Path) -> None:
    result = torchrun_train(2, "--config", str(CARTPOLE), "--run-dir", str(tmp_path / "run"), "--dry-run")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("rank ")]
    assert [line.split()[1] for line in lines] == ["0/2", "1/2"]
    assert "envs 16 seeds 1..16" in lines[0] and "envs 16 seeds 17..32" in lines[1]
    assert all("backend gloo" in line and "master 127.0.0.1:" in line for line in lines)
    assert all("interface lo " in line for line in lines)  # the interface that reaches the master
    assert "dry run ok: 2 rank(s) joined" in result.stdout
    assert not (tmp_path / "run").exists()
