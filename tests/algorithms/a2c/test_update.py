"""A2C's update: one RMSprop step on the whole rollout; 2 ranks holding parts of it take exactly
the step 1 rank takes on the whole (the sample-weighted gradient mean); its loss is SB3's."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from distrl.algorithms.a2c.config import A2CConfig
from distrl.algorithms.a2c.update import A2C
from distrl.comm import TorchComm
from distrl.config.sections import ModelConfig
from distrl.models.actor_critic import ActorCritic
from distrl.storage.rollout import RolloutBatch
from tests.distributed import run_ranks

TOTAL, UPDATES = 30, 4


def make_a2c(comm: TorchComm | None = None) -> A2C:
    torch.manual_seed(0)
    policy = ActorCritic(4, gym.spaces.Discrete(3), ModelConfig(hidden_sizes=[16, 16]))
    cfg = A2CConfig(name="a2c", learning_rate=1e-2, entropy_coef=0.01)
    return A2C(policy, cfg, gradient_sync=comm.sum_gradients_ if comm else None)


def rollouts() -> list[RolloutBatch]:
    gen = torch.Generator().manual_seed(5)
    return [
        RolloutBatch(
            obs=torch.randn(TOTAL, 4, generator=gen),
            actions=torch.randint(3, (TOTAL,), generator=gen),
            behaviour_log_probs=torch.zeros(TOTAL),
            values=torch.zeros(TOTAL),
            advantages=torch.randn(TOTAL, generator=gen),
            returns=torch.randn(TOTAL, generator=gen),
        )
        for _ in range(UPDATES)
    ]


def flat(a2c: A2C) -> np.ndarray:
    return torch.cat([p.detach().reshape(-1) for p in a2c.policy.parameters()]).numpy()


def _rank_updates(comm: TorchComm, split: int, out: Path) -> None:
    a2c = make_a2c(comm)
    rows = torch.arange(0, split) if comm.rank == 0 else torch.arange(split, TOTAL)
    for batch in rollouts():
        a2c.update(batch.chunks(rows))
    np.save(out / f"rank{comm.rank}.npy", flat(a2c))


@pytest.mark.parametrize("split", [TOTAL // 2, 8], ids=["equal-parts", "unequal-parts"])
@pytest.mark.slow
def test_two_ranks_with_parts_of_the_rollout_match_one_rank(tmp_path: Path, split: int) -> None:
    single = make_a2c()
    before = flat(single)
    for batch in rollouts():
        single.update(batch)
    expected = flat(single)
    run_ranks(_rank_updates, 2, split, tmp_path)
    rank0, rank1 = (np.load(tmp_path / f"rank{r}.npy") for r in range(2))
    np.testing.assert_array_equal(rank0, rank1)
    # RMSprop divides by the root of a running squared gradient, which magnifies float rounding
    # (1.02e-5 seen on an Intel Xeon with AMX, whose kernels sum in another order).
    np.testing.assert_allclose(rank0, expected, rtol=0, atol=2e-5)
    assert np.abs(expected - before).max() > 1e-3


def test_loss_is_policy_gradient_plus_squared_value_error_minus_entropy() -> None:
    a2c = make_a2c()
    batch = rollouts()[0]
    loss, terms = a2c.loss(batch)
    log_probs, entropy, values = a2c.policy.action_stats(batch.obs, batch.actions, None, None)
    expected_policy = -(batch.advantages * log_probs).mean()
    expected_value = ((values - batch.returns) ** 2).mean()
    torch.testing.assert_close(terms["policy_loss"], expected_policy.detach())
    torch.testing.assert_close(terms["value_loss"], expected_value.detach())
    torch.testing.assert_close(loss, expected_policy + 0.5 * expected_value - 0.01 * entropy.mean())
