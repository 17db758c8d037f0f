"""DQN's collection: a rank's envs split over two collectors (as over two env workers) give the
very transitions one collector over all of them gives, and exploration follows epsilon."""

from __future__ import annotations

import torch

from distrl.collect.base import CollectRequest
from distrl.collect.transitions import EpsilonGreedy, TransitionCollector, exploration_noise
from distrl.config.run import load_config
from distrl.envs import make_vec_env
from distrl.models.policies import make_q_network
from distrl.storage.transitions import TransitionSegment
from tests.helpers import CARTPOLE_DQN

CPU = torch.device("cpu")
SEEDS = [11, 12, 13, 14, 15]
NOISE = [1, 0, 0, 1]


def collectors(parts: list[slice]) -> list[TransitionCollector]:
    cfg = load_config(CARTPOLE_DQN, ["algo.rollout_steps=40"])
    torch.manual_seed(0)
    q_network = None
    out = []
    for part in parts:
        env = make_vec_env(cfg.env, SEEDS[part], CPU)
        if q_network is None:
            q_network = make_q_network(cfg, env.observation_space, env.action_space)
        noise = exploration_noise(NOISE, len(SEEDS), part, CPU)
        out.append(TransitionCollector(cfg, env, EpsilonGreedy(q_network), noise, CPU))
    return out


def collect(parts: list[slice], epsilon: float, times: int = 2) -> list[TransitionSegment]:
    made = collectors(parts)
    for collector in made:
        collector.reset()
    request = CollectRequest(policy_version=0, exploration=epsilon)
    return [TransitionSegment.join([c.collect(request) for c in made], CPU) for _ in range(times)]


def test_envs_split_over_collectors_give_the_same_transitions() -> None:
    whole = collect([slice(0, 5)], epsilon=0.5)
    split = collect([slice(0, 2), slice(2, 5)], epsilon=0.5)
    for one, two in zip(whole, split, strict=True):
        for name in ("obs", "actions", "rewards", "next_obs", "terminated", "ended", "restarted"):
            assert torch.equal(getattr(one, name), getattr(two, name)), name
    assert whole[0].restarted.all() and not whole[1].restarted.any()  # reset before the first only
    assert whole[1].ended.any()  # episodes ended within the 80 steps


def test_epsilon_one_explores_uniformly_and_zero_acts_greedily() -> None:
    (explored,) = collect([slice(0, 5)], epsilon=1.0, times=1)
    share = explored.actions.float().mean().item()
    assert 0.4 < share < 0.6  # 200 uniform picks of CartPole's two actions
    made = collectors([slice(0, 5)])
    made[0].reset()
    greedy = made[0].collect(CollectRequest(policy_version=0))
    with torch.no_grad():
        expected = made[0].policy.q_network(greedy.obs).argmax(dim=-1)
    assert torch.equal(greedy.actions, expected)
