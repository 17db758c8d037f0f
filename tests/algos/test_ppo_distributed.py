"""DD-PPO math: 2 ranks holding parts of a batch take exactly the step 1 rank takes on all of it,
also when the parts differ in size (a straggler's rollout was cut short, or uneven env shares),
for MLP policies (categorical, Gaussian), a Nature-CNN policy on uint8 images, and policies with
memory (a CNN with an LSTM, an MLP with a GRU) updated on chunks of consecutive steps; and when
the ranks hold shards of the policy (``train.sharding=fsdp``), not all of it."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from distrl.algos.ppo import PPO
from distrl.algos.ppo_config import PPOConfig
from distrl.comm import TorchComm
from distrl.config.sections import ModelConfig
from distrl.io.shards import full_tensor
from distrl.models.actor_critic import ActorCritic
from distrl.models.memory import reset_ended
from distrl.runners.on_policy import advantage_sums, normalize_advantages
from distrl.storage.rollout import RolloutBatch, step_major_chunks
from tests.distributed import run_ranks

TOTAL = 96
STEPS, ENVS, CHUNK = 8, 12, 4
"""A memory case's rollout (``STEPS * ENVS == TOTAL`` samples) and its chunks' length: 24 chunks."""
MINIBATCHES = 3
EPOCHS = 3
CFG = PPOConfig(num_minibatches=MINIBATCHES, update_epochs=EPOCHS, learning_rate=3e-3)


IMAGE = gym.spaces.Box(0, 255, (3, 36, 36), np.uint8)
"""The CNN case's observations (the smallest the Nature CNN takes)."""


def make_policy(kind: str) -> ActorCritic:
    """The CNNs in float64: their sums run over thousands of terms, whose float32 rounding differs
    with how a batch is split (~1e-6 after this update); the math is what is tested."""
    torch.manual_seed(0)
    space = gym.spaces.Box(-1, 1, (2,)) if kind == "gaussian" else gym.spaces.Discrete(3)
    if kind == "cnn":
        return ActorCritic(IMAGE, space, ModelConfig()).double()
    if kind == "cnn-lstm":
        return ActorCritic(IMAGE, space, ModelConfig(memory="lstm", memory_size=32)).double()
    memory = "gru" if kind == "mlp-gru" else "none"
    return ActorCritic(5, space, ModelConfig(hidden_sizes=[16, 16], memory=memory, memory_size=16))


def full_batch(policy: ActorCritic) -> RolloutBatch:
    """A fixed batch of TOTAL samples: rank 0 holds its first ``split`` chunks, rank 1 the rest.
    With memory, a rollout of STEPS steps of ENVS envs acted step by step, episodes ending at
    random, in chunks of CHUNK steps; without, single samples."""
    gen = torch.Generator().manual_seed(1)
    if isinstance(policy.encoder, torch.nn.Identity):
        obs = torch.randn(STEPS, ENVS, 5, generator=gen)
    else:
        obs = torch.randint(0, 256, (STEPS, ENVS, *IMAGE.shape), generator=gen, dtype=torch.uint8)
    draw = torch.randn if policy.continuous else torch.rand
    dones = (torch.rand(STEPS, ENVS, generator=gen) < 0.2).to(torch.float64)
    state = policy.initial_state(ENVS)
    steps: list[tuple[torch.Tensor, ...]] = []
    for t in range(STEPS):
        actions, log_probs, values, next_state = policy.act(
            obs[t], draw(policy.noise_shape(ENVS), generator=gen), state
        )
        steps.append((actions, log_probs, values, state))
        state = reset_ended(next_state, dones[t])
    actions, log_probs, values, states = (torch.stack(field) for field in zip(*steps, strict=True))
    advantages = (torch.randn(STEPS, ENVS, generator=gen) * 2 + 1).to(values.dtype)
    returns = values + torch.randn(STEPS, ENVS, generator=gen).to(values.dtype)
    fields = (obs, actions, log_probs, values, advantages, returns)
    if policy.memory is None:
        return RolloutBatch(*(field.flatten(0, 1) for field in fields))
    return RolloutBatch(*(step_major_chunks(f, CHUNK) for f in (*fields, states, dones)), CHUNK)


def local_sampler(epoch_perms: list[torch.Tensor]):
    """Each rank's minibatch k of an epoch: the k-th part of that epoch's permutation."""
    epochs = iter(epoch_perms)
    return lambda n: list(next(epochs).tensor_split(MINIBATCHES))


def global_sampler(rank0_perms: list[torch.Tensor], rank1_perms: list[torch.Tensor], split: int):
    """One process: minibatch k is the union of both ranks' minibatch k."""
    epochs = iter(zip(rank0_perms, rank1_perms, strict=True))

    def sample(n: int) -> list[torch.Tensor]:
        first, second = next(epochs)
        parts = zip(first.tensor_split(MINIBATCHES), second.tensor_split(MINIBATCHES), strict=True)
        return [torch.cat([a, b + split]) for a, b in parts]

    return sample


def perms(size: int, seed: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return [torch.randperm(size, generator=gen) for _ in range(EPOCHS)]


def rank_part(rank: int, split: int, total: int) -> tuple[int, int, int]:
    """(first chunk, end chunk, permutation seed) of ``rank``'s part of ``total`` chunks."""
    return (0, split, 2) if rank == 0 else (split, total, 3)


def flat_params(policy: ActorCritic) -> np.ndarray:
    """All weights, a sharded policy's gathered whole (a collective)."""
    return torch.cat([full_tensor(p.detach()).reshape(-1) for p in policy.parameters()]).numpy()


def _rank_update(comm: TorchComm, kind: str, split: int, out: Path, sharding: str = "none") -> None:
    policy = make_policy(kind)
    batch = full_batch(policy)
    comm.shard_(policy, sharding)  # after the batch: it was acted whole
    start, end, seed = rank_part(comm.rank, split, batch.num_chunks)
    batch = batch.chunks(torch.arange(start, end))
    global_sums = comm.sum_scalars(advantage_sums(batch.advantages))
    batch.advantages = normalize_advantages(batch.advantages, *global_sums)
    sampler = local_sampler(perms(end - start, seed))
    PPO(policy, CFG, MINIBATCHES, gradient_sync=comm.sum_gradients_).update(batch, sampler)
    np.save(out / f"rank{comm.rank}.npy", flat_params(policy))


@pytest.mark.parametrize(
    ("kind", "split", "cpu_sum", "sharding"),
    [
        ("categorical", TOTAL // 2, "socket", "none"),
        ("categorical", 61, "socket", "none"),
        ("gaussian", TOTAL // 2, "socket", "none"),
        ("gaussian", 61, "socket", "none"),
        ("cnn", 61, "socket", "none"),
        # The same math over gloo's collectives (comm.cpu_sum=gloo, the fallback for other groups).
        ("categorical", 61, "gloo", "none"),
        ("gaussian", 61, "gloo", "none"),
        # Parts of whole chunks: 15 and 9 of the 24.
        ("cnn-lstm", 15, "socket", "none"),
        ("mlp-gru", 15, "socket", "none"),
        # Sharded (FSDP2 averages the ranks' gradients; ``ShardedGradients`` makes that the mean
        # over all samples), also with a rank that has none and runs its passes on empty batches.
        ("categorical", 61, "socket", "fsdp"),
        ("gaussian", 61, "socket", "fsdp"),
        ("mlp-gru", 15, "socket", "fsdp"),
        ("categorical", TOTAL, "socket", "fsdp"),
    ],
    ids=lambda v: {
        TOTAL // 2: "equal-parts",
        61: "unequal-parts",
        15: "unequal-chunks",
        TOTAL: "rank-1-empty",
    }.get(v, v),
)
@pytest.mark.slow
def test_two_ranks_with_parts_of_a_batch_match_one_rank_with_the_whole_batch(
    tmp_path: Path, kind: str, split: int, cpu_sum: str, sharding: str
) -> None:
    policy = make_policy(kind)
    before = flat_params(policy)
    batch = full_batch(policy)
    batch.advantages = normalize_advantages(batch.advantages, *advantage_sums(batch.advantages))
    sampler = global_sampler(perms(split, 2), perms(batch.num_chunks - split, 3), split)
    PPO(policy, CFG, MINIBATCHES).update(batch, sampler)
    expected = flat_params(policy)

    run_ranks(_rank_update, 2, kind, split, tmp_path, sharding, cpu_sum=cpu_sum)
    rank0, rank1 = (np.load(tmp_path / f"rank{r}.npy") for r in range(2))
    np.testing.assert_array_equal(rank0, rank1)  # bit-identical across ranks
    assert np.abs(expected - before).max() > 1e-3  # the update really moved the weights
    np.testing.assert_allclose(rank0, expected, atol=1e-6, rtol=0)
