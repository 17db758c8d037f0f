"""Collection with ``train.compile``: acting through ``torch.compile`` collects the eager rollout."""

from __future__ import annotations

import copy
from dataclasses import fields

import pytest
import torch

from distrl.collect.base import CollectRequest
from distrl.collect.rollout import ActionNoise, RolloutCollector
from distrl.config.run import load_config
from distrl.envs import make_vec_env
from distrl.models.actor_critic import ActorCritic

CPU = torch.device("cpu")


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"], ids=["categorical", "gaussian"])
@pytest.mark.slow
def test_compiled_acting_collects_the_eager_rollout(env_id: str) -> None:
    # Episodes cut at 10 steps: the rollout also bootstraps truncations from final observations.
    overrides = [
        f"env.id={env_id}", "env.backend=torch", "env.num_envs=64", "env.max_episode_steps=10",
        "algo.rollout_steps=24",
    ]  # fmt: skip
    torch.manual_seed(0)
    segments = {}
    policy = None
    for compiled in (False, True):
        cfg = load_config(None, [*overrides, f"train.compile={str(compiled).lower()}"])
        env = make_vec_env(cfg.env, list(range(64)), CPU)
        if policy is None:
            policy = ActorCritic(env.observation_space.shape[0], env.action_space, cfg.model)
        acting = copy.deepcopy(policy)
        noise = ActionNoise.for_policy(acting, [7], 64, slice(None), CPU)
        collector = RolloutCollector(cfg, env, acting, None, None, noise, CPU)
        collector.reset()
        assert (collector.act != acting.act) == compiled  # compiled only when asked
        torch._dynamo.utils.counters.clear()
        segments[compiled] = collector.collect(CollectRequest(policy_version=0))
        assert not torch._dynamo.utils.counters["graph_break"]  # acting is one graph
    eager, fused = segments[False], segments[True]
    assert eager.dones[9].all() and eager.dones[19].all()
    for field in fields(eager):
        a, b = getattr(eager, field.name), getattr(fused, field.name)
        if isinstance(a, torch.Tensor):
            assert torch.allclose(a.float(), b.float(), atol=1e-5), field.name
        else:
            assert a == b, field.name
