"""IQL's update: 2 ranks holding parts of every batch (one of them possibly none) take exactly the
steps 1 rank takes on the whole batches (value, critics, targets, policy); the value function
fits the expectile of the target critics' Q; with temperature 0 the policy clones the data."""

from __future__ import annotations

import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from distrl.algorithms.iql.config import IQLConfig
from distrl.algorithms.iql.networks import TanhMeanGaussianActor, ValueNetwork
from distrl.algorithms.iql.update import IQL
from distrl.comm import TorchComm
from distrl.config.sections import ModelConfig
from distrl.models.continuous import ActionScale, TwinQ
from distrl.storage.replay import TransitionBatch
from tests.algorithms.sac.test_update import ACT, ACTIONS, OBS, TOTAL, batches, part
from tests.distributed import run_ranks


def make_iql(comm: TorchComm | None = None, total_gradient_steps: int = 1000, **overrides: object) -> IQL:
    torch.manual_seed(0)
    model = ModelConfig(hidden_sizes=[16, 16], activation="relu")
    observations = gym.spaces.Box(-1.0, 1.0, (OBS,))
    value, critic = ValueNetwork(observations, model), TwinQ(observations, ACT, model)
    actor = TanhMeanGaussianActor(observations, ACT, model)
    cfg = IQLConfig(name="iql", **{"learning_rate": 1e-2, "tau": 0.1, **overrides})
    sync = comm.sum_gradients_ if comm else None
    return IQL(value, critic, actor, ActionScale(ACTIONS), cfg, total_gradient_steps, gradient_sync=sync)


def flat(iql: IQL) -> np.ndarray:
    nets = (iql.value, iql.critic, iql.critic_target, iql.actor)
    return torch.cat([p.detach().reshape(-1) for net in nets for p in net.parameters()]).numpy()


def _rank_steps(comm: TorchComm, split: int, out: Path) -> None:
    iql = make_iql(comm)
    start, end = (0, split) if comm.rank == 0 else (split, TOTAL)
    for batch, noise in batches():
        iql.gradient_step(part(batch, noise, start, end)[0])
    np.save(out / f"rank{comm.rank}.npy", flat(iql))


@pytest.mark.parametrize("split", [TOTAL // 2, 7, TOTAL], ids=["equal-parts", "unequal-parts", "one-empty"])
@pytest.mark.slow
def test_two_ranks_with_parts_of_each_batch_match_one_rank(tmp_path: Path, split: int) -> None:
    single = make_iql()
    before = flat(single)
    for batch, _ in batches():
        stats = single.gradient_step(batch)
    expected = flat(single)
    assert stats["skipped_steps"] == 0.0 and stats["policy_weight"] != 1.0
    # The divergence diagnostics: exp(temperature * advantage) at these small advantages stays
    # far under the cap (100), so no row's weight is clipped.
    assert abs(stats["advantage_mean"]) < 1.0 and stats["policy_weight_clipped"] == 0.0

    run_ranks(_rank_steps, 2, split, tmp_path)
    rank0, rank1 = (np.load(tmp_path / f"rank{r}.npy") for r in range(2))
    np.testing.assert_array_equal(rank0, rank1)  # every network bit-identical across ranks
    np.testing.assert_allclose(rank0, expected, rtol=0, atol=1e-5)
    assert np.abs(expected - before).max() > 1e-3  # the steps really moved the weights


def one_state_batch(actions: torch.Tensor) -> TransitionBatch:
    rows = len(actions)
    return TransitionBatch(
        obs=torch.zeros(rows, OBS),
        actions=actions,
        returns=torch.zeros(rows),
        next_obs=torch.zeros(rows, OBS),
        terminated=torch.ones(rows, dtype=torch.bool),
        steps=torch.ones(rows, dtype=torch.int64),
    )


@pytest.mark.parametrize("expectile", [0.7, 0.9])
@pytest.mark.slow
def test_the_value_fits_the_expectile_of_the_target_q(
    expectile: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One state, two logged actions whose target Q is 0 and 1: the tau-expectile v solves
    # tau (1 - v) = (1 - tau) v, so v = tau.
    iql = make_iql(expectile=expectile, learning_rate=1e-2)

    class FixedQ(torch.nn.Module):
        def forward(self, obs: torch.Tensor, unit_actions: torch.Tensor) -> torch.Tensor:
            q = (unit_actions[:, :1] > 0).float()
            return torch.cat([q, q + 5.0], dim=-1)  # the min is the first

    iql.critic_target = FixedQ()
    monkeypatch.setattr(
        "distrl.algorithms.iql.update.polyak_update_", lambda *args: None
    )  # keep the fixed target
    high, low = torch.as_tensor(ACTIONS.high), torch.as_tensor(ACTIONS.low)
    batch = one_state_batch(torch.stack([low, high]))
    for _ in range(1500):
        iql.gradient_step(batch)
    assert float(iql.value(torch.zeros(1, OBS)).detach()) == pytest.approx(expectile, abs=0.02)


def test_with_temperature_zero_the_policy_clones_the_logged_actions() -> None:
    iql = make_iql(temperature=1e-9, learning_rate=1e-2)
    target = torch.tensor([1.0, 0.25])  # in the env's bounds [-2, 2] x [0, 1]
    batch = one_state_batch(target.expand(8, ACT).clone())
    for _ in range(600):
        iql.gradient_step(batch)
    mean = ActionScale(ACTIONS).to_env(iql.actor.deterministic(torch.zeros(1, OBS)))
    np.testing.assert_allclose(mean.detach().numpy()[0], target.numpy(), atol=0.02)


def test_the_actors_cosine_decay_spans_the_runs_gradient_steps_and_leaves_the_critics_alone() -> None:
    iql = make_iql(total_gradient_steps=4, actor_cosine_decay=True, learning_rate=1e-2)
    batch = batches()[0][0]
    used = []
    for _ in range(6):
        iql.gradient_step(batch)
        used.append(iql.optimizers["actor"].param_groups[0]["lr"])
        assert (
            iql.optimizers["critic"].param_groups[0]["lr"]
            == iql.optimizers["value"].param_groups[0]["lr"]
            == 1e-2
        )
    expected = [1e-2 * 0.5 * (1 + math.cos(math.pi * min(k / 4, 1.0))) for k in range(6)]
    np.testing.assert_allclose(used, expected, atol=1e-12)
    iql.set_learning_rate(5e-3)  # anneal_lr's base for the next iteration: the cosine scales it
    iql.gradient_steps_done = 2
    iql.gradient_step(batch)
    assert iql.optimizers["actor"].param_groups[0]["lr"] == pytest.approx(2.5e-3)
