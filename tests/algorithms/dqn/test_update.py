"""DQN's distributed math: 2 ranks holding parts of every batch take exactly the steps 1 rank
takes on the whole batches (also with unequal parts, and with one rank holding no samples at all,
as a rank whose logged data ran out does), and the target network follows."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest
import torch

from distrl.algorithms.dqn.update import DQN, DQNConfig
from distrl.comm import TorchComm
from distrl.config.sections import ModelConfig
from distrl.io.shards import full_tensor
from distrl.models.q_network import QNetwork
from distrl.storage.replay import TransitionBatch
from tests.distributed import run_ranks

STEPS, TOTAL = 6, 40


def make_dqn(comm: TorchComm | None = None, sharding: str = "none", **overrides: float) -> DQN:
    torch.manual_seed(0)
    q_network = QNetwork(4, 3, ModelConfig(hidden_sizes=[16, 16], activation="relu"))
    target_network = copy.deepcopy(q_network).requires_grad_(False)
    for network in (q_network, target_network):
        if comm is not None:
            comm.shard_(network, sharding)
    cfg = DQNConfig(name="dqn", **{"learning_rate": 1e-2, "target_update_interval": 2, **overrides})
    return DQN(q_network, cfg, comm.sum_gradients_ if comm else None, target_network=target_network)


def batches() -> list[TransitionBatch]:
    gen = torch.Generator().manual_seed(3)
    return [
        TransitionBatch(
            obs=torch.randn(TOTAL, 4, generator=gen),
            actions=torch.randint(3, (TOTAL,), generator=gen),
            returns=torch.randn(TOTAL, generator=gen),
            next_obs=torch.randn(TOTAL, 4, generator=gen),
            terminated=torch.rand(TOTAL, generator=gen) < 0.2,
            steps=torch.randint(1, 4, (TOTAL,), generator=gen),
            # Logged data says which actions the next state allows (at least action 0 here).
            next_action_mask=(torch.rand(TOTAL, 3, generator=gen) < 0.6) | (torch.arange(3) == 0),
        )
        for _ in range(STEPS)
    ]


def part(batch: TransitionBatch, start: int, end: int) -> TransitionBatch:
    fields = (getattr(batch, f) for f in batch.__dataclass_fields__)
    return TransitionBatch(*(None if v is None else v[start:end] for v in fields))


def flat(dqn: DQN) -> np.ndarray:
    nets = (dqn.q_network, dqn.target_network)
    return torch.cat([full_tensor(p.detach()).reshape(-1) for net in nets for p in net.parameters()]).numpy()


def _rank_steps(
    comm: TorchComm, split: int, cql_alpha: float, out: Path, sharding: str = "none", tau: float = 1.0
) -> None:
    dqn = make_dqn(comm, sharding, cql_alpha=cql_alpha, tau=tau)
    start, end = (0, split) if comm.rank == 0 else (split, TOTAL)
    for batch in batches():
        dqn.gradient_step(part(batch, start, end))
    np.save(out / f"rank{comm.rank}.npy", flat(dqn))


@pytest.mark.parametrize(
    "split", [TOTAL // 2, 13, 0], ids=["equal-parts", "unequal-parts", "rank-0-without-samples"]
)
@pytest.mark.parametrize("cql_alpha", [0.0, 1.0], ids=["dqn", "cql"])
@pytest.mark.slow
def test_two_ranks_with_parts_of_each_batch_match_one_rank(
    tmp_path: Path, split: int, cql_alpha: float
) -> None:
    single = make_dqn(cql_alpha=cql_alpha)
    before = flat(single)
    for batch in batches():
        single.gradient_step(batch)
    expected = flat(single)

    run_ranks(_rank_steps, 2, split, cql_alpha, tmp_path)
    rank0, rank1 = (np.load(tmp_path / f"rank{r}.npy") for r in range(2))
    np.testing.assert_array_equal(rank0, rank1)  # online and target networks bit-identical
    np.testing.assert_allclose(rank0, expected, rtol=0, atol=1e-6)
    assert np.abs(expected - before).max() > 1e-3  # the steps really moved the weights


@pytest.mark.parametrize("split", [13, 0], ids=["unequal-parts", "rank-0-without-samples"])
def test_two_sharded_ranks_match_one_rank_with_a_sharded_target(tmp_path: Path, split: int) -> None:
    """``train.sharding=fsdp``: a rank whose logged data ran out still runs every pass (each is a
    collective), on an empty batch at weight 0; the target's shards follow the online ones'."""
    single = make_dqn(cql_alpha=1.0, tau=0.5)
    for batch in batches():
        single.gradient_step(batch)
    run_ranks(_rank_steps, 2, split, 1.0, tmp_path, "fsdp", 0.5)
    for rank in range(2):
        np.testing.assert_allclose(np.load(tmp_path / f"rank{rank}.npy"), flat(single), rtol=0, atol=1e-6)


def test_target_network_is_copied_every_interval_and_blended_with_tau() -> None:
    dqn = make_dqn()
    first, second = batches()[:2]
    initial = params(dqn.target_network)
    dqn.gradient_step(first)
    assert torch.equal(params(dqn.target_network), initial)  # interval 2: not yet
    dqn.gradient_step(second)
    assert torch.equal(params(dqn.target_network), params(dqn.q_network))

    soft = make_dqn(tau=0.25, target_update_interval=1)
    old_target = params(soft.target_network)
    soft.gradient_step(first)
    expected = old_target + 0.25 * (params(soft.q_network) - old_target)
    torch.testing.assert_close(params(soft.target_network), expected)


def params(net: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()]).clone()
