"""``env.backend: ale``: Atari through ale-py's vectorised env, CleanRL's preprocessing, uint8
frames, episodic life read from the lives (the game, and the statistics' episode, go on), raw
game scores with rewards clipped only for training (PPO and DQN), and the shipped Pong configs (a
frame stack, an LSTM) training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from distrl.algorithms.dqn.acting import EpsilonGreedy
from distrl.algorithms.dqn.networks import make_q_network
from distrl.collect.base import CollectRequest
from distrl.collect.rollout import ActionNoise, RolloutCollector
from distrl.collect.transitions import TransitionCollector, exploration_noise
from distrl.config.run import load_config
from distrl.config.sections import EnvConfig
from distrl.envs import make_vec_env
from distrl.envs.ale_backend import game_name
from distrl.errors import UserError
from distrl.models.actor_critic import ActorCritic
from tests.helpers import REPO, distrl

pytest.importorskip("ale_py", reason="the atari extra is installed by make test")

CPU = torch.device("cpu")
PONG = REPO / "configs" / "atari_pong_ppo.yaml"
PONG_LSTM = REPO / "configs" / "atari_pong_lstm_ppo.yaml"


def test_game_names_as_gymnasium_and_ale_py_write_them() -> None:
    assert game_name("ALE/Pong-v5") == "pong"
    assert game_name("ALE/BeamRider-v5") == "beam_rider"
    assert game_name("breakout") == "breakout"
    with pytest.raises(UserError, match="no Atari game 'no_such_game' in ale-py"):
        game_name("ALE/NoSuchGame-v5")


def test_frames_are_uint8_stacks_and_seeds_differ() -> None:
    env = make_vec_env(EnvConfig(id="ALE/Breakout-v5", backend="ale"), [1, 2, 3])
    obs = env.reset()
    assert obs.dtype == torch.uint8 and obs.shape == (3, 4, 84, 84)
    for _ in range(40):  # the no-op starts and the ball differ by seed
        result = env.step(torch.ones(3, dtype=torch.int64))
    assert not torch.equal(result.obs[0], result.obs[1])
    env.close()


@pytest.mark.slow
def test_a_lost_life_ends_the_agents_episode_not_the_game() -> None:
    """Random Breakout: lost lives end learning episodes (dones); whole games are the statistics'
    episodes (episode_ends), each of several lives; the reward is the raw score, clipped for training."""
    cfg = load_config(PONG, ["env.id=ALE/Breakout-v5", "env.num_envs=4", "algo.rollout_steps=256"])
    env = make_vec_env(cfg.env, [0, 1, 2, 3], CPU)
    policy = ActorCritic(env.observation_space, env.action_space, cfg.model)
    noise = ActionNoise.for_policy(policy, [5], 4, slice(None), CPU)
    collector = RolloutCollector(cfg, env, policy, None, None, noise, CPU)
    collector.reset()
    segment = collector.collect(CollectRequest(policy_version=0))
    dones, ends = segment.dones.bool(), segment.episode_ends
    assert (ends <= dones).all()  # a game's end is a learning end too
    assert (dones & ~ends).sum() >= 4  # lives lost mid-game: at least one per env in 256 steps
    assert torch.equal(segment.rewards, torch.sign(segment.env_rewards))  # no truncations here
    env.close()


@pytest.mark.slow
def test_dqn_ends_the_agents_episode_on_a_lost_life_and_learns_clipped_rewards() -> None:
    """DQN under episodic life (CleanRL's Atari DQN): a lost life terminates the stored transition
    (no bootstrap); whole games are the statistics' episodes; rewards are stored as their sign."""
    cfg = load_config(
        None,
        ["env.id=ALE/Breakout-v5", "env.backend=ale", "env.num_envs=4", "algo.name=dqn",
         "algo.rollout_steps=256", "normalize.clip_rewards=true"],
    )  # fmt: skip
    env = make_vec_env(cfg.env, [0, 1, 2, 3], CPU)
    q_network = make_q_network(cfg, env.observation_space, env.action_space, CPU)
    noise = exploration_noise([5], 4, slice(None), CPU)
    collector = TransitionCollector(cfg, env, EpsilonGreedy(q_network), noise, CPU)
    collector.reset()
    segment = collector.collect(CollectRequest(policy_version=0, exploration=1.0))
    assert (segment.episode_ends <= segment.ended).all()  # a game's end is a learning end too
    assert (segment.terminated & ~segment.episode_ends).sum() >= 4  # lives lost mid-game
    assert torch.equal(segment.rewards, torch.sign(segment.env_rewards))
    env.close()


@pytest.mark.parametrize("config", [PONG, PONG_LSTM], ids=["frame-stack", "lstm"])
@pytest.mark.slow
def test_the_shipped_pong_configs_train(tmp_path: Path, config: Path) -> None:
    result = distrl(
        "train", "--config", str(config), "--run-dir", str(tmp_path), "--total-steps", "2048",
        "log.tensorboard=false", "checkpoint.interval_steps=2048",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["global_step"] for row in rows] == [1024, 2048]
    assert all(row["skipped_minibatches"] == 0 for row in rows)


@pytest.mark.slow
def test_atari_options_distrl_sets_itself_are_one_line(tmp_path: Path) -> None:
    result = distrl(
        "train", "--config", str(PONG), "--run-dir", str(tmp_path), "env.kwargs.reward_clipping=true"
    )
    assert result.returncode == 2 and "reward clipping is normalize.clip_rewards" in result.stderr, (
        result.stderr
    )
