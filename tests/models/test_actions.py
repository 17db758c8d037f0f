"""MultiDiscrete actions: one categorical per dimension, sampled from the caller's uniform noise,
log-probabilities and entropies summed over the dimensions; trained, evaluated and exported."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest
import torch

from distrl.config.sections import ModelConfig
from distrl.models.actor_critic import ActorCritic
from tests.helpers import REPO, distrl

DIALS = ["--env", "tests.envs.toy:DialsEnv", "--num-envs", "8", "algo.rollout_steps=32",
         "algo.minibatch_size=64", "train.stop_return=null", "log.tensorboard=false"]  # fmt: skip


def test_each_dimension_is_its_own_categorical() -> None:
    torch.manual_seed(0)
    policy = ActorCritic(4, gym.spaces.MultiDiscrete([3, 2]), ModelConfig())
    obs = torch.randn(6, 4)
    state = policy.initial_state(6)
    assert policy.noise_shape(6) == (6, 2)
    actions, log_probs, _, _ = policy.act(obs, torch.rand(6, 2), state)
    assert actions.shape == (6, 2) and actions.dtype == torch.int64
    assert (actions[:, 0] < 3).all() and (actions[:, 1] < 2).all()
    logits = policy.actor(obs)
    first, second = logits[:, :3].log_softmax(-1), logits[:, 3:].log_softmax(-1)
    expected = first.gather(1, actions[:, :1]).squeeze(1) + second.gather(1, actions[:, 1:]).squeeze(1)
    torch.testing.assert_close(log_probs, expected)
    again, entropy, _ = policy.action_stats(obs, actions)
    torch.testing.assert_close(again, log_probs)
    expected_entropy = -(first.exp() * first).sum(-1) - (second.exp() * second).sum(-1)
    torch.testing.assert_close(entropy, expected_entropy)
    # Uniform noise at the edges picks each dimension's first and last choices.
    edges = policy.act(obs[:2], torch.tensor([[0.0, 0.0], [0.9999999, 0.9999999]]), state[:2])[0]
    assert edges.tolist() == [[0, 0], [2, 1]]
    most_likely, _ = policy.act_deterministic(obs, state)
    assert torch.equal(most_likely, torch.stack([first.argmax(-1), second.argmax(-1)], -1))


@pytest.mark.learning(seeds=5, kept=1)
@pytest.mark.slow
def test_multi_discrete_actions_are_learnt_evaluated_and_exported(tmp_path: Path, seed: int) -> None:
    """Chance earns about 13 per episode; reading the targets earns 32."""
    run = tmp_path / "run"
    trained = distrl(
        "train", *DIALS, "--seed", str(seed), "--total-steps", "8192", "--run-dir", str(run), cwd=REPO
    )
    assert trained.returncode == 0, trained.stderr
    evaluated = distrl("eval", "--checkpoint", str(run), "--episodes", "4", "--json", cwd=REPO)
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)["return_mean"] >= 28
    out = tmp_path / "policy.pt"
    exported = distrl("export", "--checkpoint", str(run), "--format", "torchscript", "--out", str(out))
    assert exported.returncode == 0, exported.stderr
    obs = torch.eye(5)[[0, 3]].sum(0, keepdim=True)  # targets: dial one at 0, dial two at 0
    assert torch.jit.load(str(out))(obs).tolist() == [[0, 0]]


@pytest.mark.slow
def test_dqn_refuses_multi_discrete_actions_in_one_line(tmp_path: Path) -> None:
    result = distrl("train", "--env", "tests.envs.toy:DialsEnv", "algo.name=dqn", "--run-dir", str(tmp_path))
    assert result.returncode == 2 and "dqn needs Discrete actions" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
