"""DQN's collection: a rank's envs split over two collectors (as over two env workers) give the
very transitions one collector over all of them gives, exploration follows epsilon, and each
transition carries the epsilon-greedy probability of its action and the policy version asked for."""

from __future__ import annotations

from dataclasses import fields

import pytest
import torch

from distrl.algorithms.dqn.acting import EpsilonGreedy
from distrl.algorithms.dqn.networks import make_q_network
from distrl.collect.base import CollectRequest
from distrl.collect.transitions import TransitionCollector, exploration_noise
from distrl.config.run import load_config
from distrl.envs import make_vec_env
from distrl.storage.transitions import TransitionSegment
from tests.helpers import CARTPOLE_DQN

CPU = torch.device("cpu")
SEEDS = [11, 12, 13, 14, 15]
NOISE = [1, 0, 0, 1]


def collectors(parts: list[slice], env_id: str = "CartPole-v1") -> list[TransitionCollector]:
    cfg = load_config(CARTPOLE_DQN, ["algo.rollout_steps=40", f"env.id={env_id}"])
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
        for field in fields(TransitionSegment):
            a, b = getattr(one, field.name), getattr(two, field.name)
            assert torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b, field.name
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


@pytest.mark.parametrize("epsilon", [0.0, 0.3, 1.0])
def test_behaviour_log_probs_are_the_epsilon_greedy_probabilities_of_the_taken_actions(
    epsilon: float,
) -> None:
    made = collectors([slice(0, 5)], env_id="Acrobot-v1")  # three actions
    made[0].reset()
    segment = made[0].collect(CollectRequest(policy_version=7, exploration=epsilon))
    with torch.no_grad():
        greedy = made[0].policy.q_network(segment.obs).argmax(dim=-1)
    # Every action's probability: epsilon / 3 from exploring, plus 1 - epsilon for the greedy one.
    probabilities = torch.full((*greedy.shape, 3), epsilon / 3, dtype=torch.float64)
    probabilities.scatter_add_(
        -1, greedy.unsqueeze(-1), torch.full((*greedy.shape, 1), 1.0 - epsilon).double()
    )
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(greedy.shape, dtype=torch.float64))
    taken = probabilities.gather(-1, segment.actions.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(segment.behaviour_log_probs, taken.log().float())
    assert (segment.actions != greedy).any() == (epsilon > 0)  # 200 steps: both kinds where possible
    assert segment.policy_version == 7
