"""SAC's collection: each transition carries the density of its action under the policy that
took it: the squashed Gaussian actor's, or the uniform warm-up's."""

from __future__ import annotations

import math

import torch
from torch.distributions import Independent, Normal, TanhTransform, TransformedDistribution

from distrl.algorithms.sac.acting import actor_copies, squashed_gaussian_collector
from distrl.collect.base import CollectorInputs, CollectRequest
from distrl.config.run import load_config
from distrl.envs import make_vec_env
from distrl.models.continuous import ActionScale
from tests.helpers import PENDULUM_SAC

CPU = torch.device("cpu")


def test_behaviour_log_probs_are_the_densities_of_the_taken_actions() -> None:
    cfg = load_config(PENDULUM_SAC, ["env.num_envs=4", "algo.rollout_steps=16"])
    env = make_vec_env(cfg.env, [0, 1, 2, 3], CPU)
    torch.manual_seed(0)
    modules = actor_copies(cfg, env.observation_space, env.action_space, CPU)
    collector = squashed_gaussian_collector(CollectorInputs(cfg, env, modules, [3], 4, slice(None), CPU))
    collector.reset()
    warm_up = collector.collect(CollectRequest(policy_version=0, exploration=1.0))
    sampled = collector.collect(CollectRequest(policy_version=2))
    # Uniform over the actor's [-1, 1] actions (Pendulum's one dimension): density 1/2.
    torch.testing.assert_close(warm_up.behaviour_log_probs, torch.full((16, 4), -math.log(2.0)))
    # The actor's tanh-squashed Gaussian, as torch.distributions computes it at the taken actions.
    with torch.no_grad():
        mean, log_std = modules["actor"](sampled.obs)
    actor = TransformedDistribution(Independent(Normal(mean, log_std.exp()), 1), [TanhTransform()])
    unit = ActionScale(env.action_space).to_unit(sampled.actions)
    torch.testing.assert_close(sampled.behaviour_log_probs, actor.log_prob(unit), atol=1e-3, rtol=1e-4)
    assert (warm_up.policy_version, sampled.policy_version) == (0, 2)
    env.close()
