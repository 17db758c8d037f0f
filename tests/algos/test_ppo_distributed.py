"""DD-PPO math: 2 ranks holding half a batch each take exactly the step 1 rank takes on all of it."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from distrl.algos.ppo import PPO
from distrl.comm import Comm
from distrl.config import ModelConfig, PPOConfig
from distrl.models.actor_critic import ActorCritic
from distrl.runners.on_policy import normalize_advantages
from distrl.storage.rollout import RolloutBatch
from tests.distributed import run_ranks

HALF = 48
MINIBATCHES = 3
EPOCHS = 3
CFG = PPOConfig(num_minibatches=MINIBATCHES, update_epochs=EPOCHS, learning_rate=3e-3)


def make_policy(continuous: bool) -> ActorCritic:
    torch.manual_seed(0)
    space = gym.spaces.Box(-1, 1, (2,)) if continuous else gym.spaces.Discrete(3)
    return ActorCritic(5, space, ModelConfig(hidden_sizes=[16, 16]))


def full_batch(policy: ActorCritic) -> RolloutBatch:
    """A fixed batch of 2*HALF samples; rank r holds rows [r*HALF, (r+1)*HALF)."""
    gen = torch.Generator().manual_seed(1)
    obs = torch.randn(2 * HALF, 5, generator=gen)
    actions, log_probs, values = policy.act(obs)
    advantages = torch.randn(2 * HALF, generator=gen) * 2 + 1
    returns = values + torch.randn(2 * HALF, generator=gen)
    return RolloutBatch(obs, actions, log_probs, values, advantages, returns)


def local_sampler(epoch_perms: list[torch.Tensor]):
    """Each rank's minibatch k of an epoch: the k-th chunk of that epoch's permutation."""
    epochs = iter(epoch_perms)
    return lambda n: list(next(epochs).chunk(MINIBATCHES))


def global_sampler(epoch_perms: list[torch.Tensor]):
    """One process: minibatch k is the union of both ranks' minibatch k."""
    epochs = iter(epoch_perms)

    def sample(n: int) -> list[torch.Tensor]:
        chunks = next(epochs).chunk(MINIBATCHES)
        return [torch.cat([c, c + HALF]) for c in chunks]

    return sample


def perms() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(2)
    return [torch.randperm(HALF, generator=gen) for _ in range(EPOCHS)]


def flat_params(policy: ActorCritic) -> np.ndarray:
    return torch.cat([p.detach().reshape(-1) for p in policy.parameters()]).numpy()


def _rank_update(comm: Comm, continuous: bool, out: Path) -> None:
    policy = make_policy(continuous)
    batch = full_batch(policy).index(torch.arange(comm.rank * HALF, (comm.rank + 1) * HALF))
    batch.advantages = normalize_advantages(batch.advantages, comm)
    PPO(policy, CFG, gradient_sync=comm.allreduce_gradients_).update(batch, local_sampler(perms()))
    np.save(out / f"rank{comm.rank}.npy", flat_params(policy))


@pytest.mark.parametrize("continuous", [False, True], ids=["categorical", "gaussian"])
def test_two_ranks_with_half_batches_match_one_rank_with_the_whole_batch(
    tmp_path: Path, continuous: bool
) -> None:
    policy = make_policy(continuous)
    before = flat_params(policy)
    batch = full_batch(policy)
    batch.advantages = normalize_advantages(batch.advantages, Comm())
    PPO(policy, CFG).update(batch, global_sampler(perms()))
    expected = flat_params(policy)

    run_ranks(_rank_update, 2, continuous, tmp_path)
    rank0, rank1 = (np.load(tmp_path / f"rank{r}.npy") for r in range(2))
    np.testing.assert_array_equal(rank0, rank1)  # bit-identical across ranks
    assert np.abs(expected - before).max() > 1e-3  # the update really moved the weights
    np.testing.assert_allclose(rank0, expected, atol=1e-6, rtol=0)
