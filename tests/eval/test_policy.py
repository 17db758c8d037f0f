"""Checkpoints rebuild their policy from the checkpoint alone: algorithm, spaces and tensors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from distrl.envs.spaces import space_from_json
from distrl.eval.policy import load_policy
from distrl.io import checkpoint as ckpt
from distrl.io.train_state import FORMAT_VERSION
from tests.eval.reference import reference_returns
from tests.helpers import CARTPOLE, CARTPOLE_DQN, REPO, distrl

PENDULUM = REPO / "configs" / "pendulum_ppo.yaml"
SHORT = ["--total-steps", "1024", "train.stop_return=null", "log.tensorboard=false"]


@pytest.mark.parametrize(
    ("config", "overrides", "algorithm"),
    [
        (CARTPOLE, [], "ppo"),
        (PENDULUM, ["env.num_envs=2", "algo.rollout_steps=256"], "ppo"),
        (CARTPOLE_DQN, ["algo.learning_starts=256", "algo.gradient_steps=4"], "dqn"),
    ],
    ids=["ppo-discrete", "ppo-continuous", "dqn"],
)
@pytest.mark.slow
def test_policy_is_rebuilt_without_an_env(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, config: Path, overrides: list[str], algorithm: str
) -> None:
    result = distrl("train", "--config", str(config), "--run-dir", str(tmp_path), *SHORT, *overrides)
    assert result.returncode == 0, result.stderr
    state = json.loads((ckpt.resolve_checkpoint(tmp_path) / "state.json").read_text())
    assert (state["format_version"], state["algorithm"]) == (FORMAT_VERSION, algorithm)

    def no_env(*args: object, **kwargs: object) -> None:
        raise AssertionError("loading a policy must not build an env")

    for module in ("distrl.envs", "distrl.eval.episodes", "distrl.runners.base"):
        monkeypatch.setattr(f"{module}.make_vec_env", no_env)
    loaded = load_policy(tmp_path)
    obs_dim = state["observation_space"]["shape"][0]
    actions = loaded.policy(torch.randn(5, obs_dim))
    assert actions.shape[0] == 5
    if state["action_space"]["type"] == "Box":  # the mean, clipped to the action bounds
        assert actions.abs().max() <= space_from_json(state["action_space"]).high[0]
    else:
        assert set(actions.tolist()) <= set(range(state["action_space"]["n"]))


@pytest.mark.slow
def test_dqn_trains_evaluates_and_resumes_from_the_command_line(tmp_path: Path) -> None:
    common = ["train", "--config", str(CARTPOLE_DQN), "--run-dir", str(tmp_path), "train.stop_return=null"]
    common += ["algo.learning_starts=256", "algo.gradient_steps=8", "checkpoint.interval_steps=512"]
    assert distrl(*common, "--total-steps", "1024").returncode == 0
    resumed = distrl(*common, "--total-steps", "2048", "--resume")
    assert resumed.returncode == 0, resumed.stderr
    steps = [
        json.loads(line)["global_step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()
    ]
    assert steps == list(range(256, 2049, 256))  # 8 envs x 32 steps per iteration, none repeated
    report = json.loads(distrl("eval", "--checkpoint", str(tmp_path), "--episodes", "2", "--json").stdout)
    assert report["episodes"] == 2 and report["global_step"] == 2048
    # The resumed run's final policy, its episodes played again apart from `distrl eval`.
    assert report["returns"] == reference_returns(tmp_path, 2)
