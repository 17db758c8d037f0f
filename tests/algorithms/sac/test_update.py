"""SAC's update: 2 ranks holding parts of every batch take exactly the steps 1 rank takes on the
whole batches (critics, targets, actor and temperature); the squashed Gaussian's log-probability
is the change of variables; the target critics follow by Polyak steps."""

from __future__ import annotations

import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from distrl.algorithms.sac.config import SACConfig
from distrl.algorithms.sac.networks import SquashedGaussianActor
from distrl.algorithms.sac.update import SAC
from distrl.comm import TorchComm
from distrl.config.sections import ModelConfig
from distrl.models.continuous import ActionScale, TwinQ
from distrl.storage.replay import TransitionBatch
from tests.distributed import run_ranks

STEPS, TOTAL, OBS, ACT = 5, 24, 3, 2
ACTIONS = gym.spaces.Box(
    low=np.array([-2.0, 0.0], dtype=np.float32), high=np.array([2.0, 1.0], dtype=np.float32), dtype=np.float32
)


def make_sac(comm: TorchComm | None = None, **overrides: object) -> SAC:
    torch.manual_seed(0)
    model = ModelConfig(hidden_sizes=[16, 16], activation="relu")
    observations = gym.spaces.Box(-1.0, 1.0, (OBS,))
    actor, critic = SquashedGaussianActor(observations, ACTIONS, model), TwinQ(observations, ACT, model)
    cfg = SACConfig(name="sac", **{"learning_rate": 1e-2, "tau": 0.1, **overrides})
    return SAC(actor, critic, ActionScale(ACTIONS), cfg, gradient_sync=comm.sum_gradients_ if comm else None)


def batches() -> list[tuple[TransitionBatch, tuple[torch.Tensor, torch.Tensor]]]:
    gen = torch.Generator().manual_seed(3)
    low, high = torch.as_tensor(ACTIONS.low), torch.as_tensor(ACTIONS.high)
    return [
        (
            TransitionBatch(
                obs=torch.randn(TOTAL, OBS, generator=gen),
                actions=low + torch.rand(TOTAL, ACT, generator=gen) * (high - low),
                returns=torch.randn(TOTAL, generator=gen),
                next_obs=torch.randn(TOTAL, OBS, generator=gen),
                terminated=torch.rand(TOTAL, generator=gen) < 0.2,
                steps=torch.ones(TOTAL, dtype=torch.int64),
            ),
            (torch.randn(TOTAL, ACT, generator=gen), torch.randn(TOTAL, ACT, generator=gen)),
        )
        for _ in range(STEPS)
    ]


def part(batch: TransitionBatch, noise: tuple[torch.Tensor, ...], start: int, end: int) -> tuple:
    fields = (getattr(batch, f) for f in batch.__dataclass_fields__)
    return TransitionBatch(*(None if v is None else v[start:end] for v in fields)), tuple(
        n[start:end] for n in noise
    )


def flat(sac: SAC) -> np.ndarray:
    nets = (sac.actor, sac.critic, sac.critic_target, sac.temperature)
    return torch.cat([p.detach().reshape(-1) for net in nets for p in net.parameters()]).numpy()


def _rank_steps(comm: TorchComm, split: int, out: Path) -> None:
    sac = make_sac(comm)
    start, end = (0, split) if comm.rank == 0 else (split, TOTAL)
    for batch, noise in batches():
        sac.gradient_step(*part(batch, noise, start, end))
    np.save(out / f"rank{comm.rank}.npy", flat(sac))


@pytest.mark.parametrize("split", [TOTAL // 2, 7], ids=["equal-parts", "unequal-parts"])
@pytest.mark.slow
def test_two_ranks_with_parts_of_each_batch_match_one_rank(tmp_path: Path, split: int) -> None:
    single = make_sac()
    before = flat(single)
    for batch, noise in batches():
        stats = single.gradient_step(batch, noise)
    expected = flat(single)
    assert stats["alpha"] != 1.0 and stats["skipped_steps"] == 0.0  # the temperature is learnt

    run_ranks(_rank_steps, 2, split, tmp_path)
    rank0, rank1 = (np.load(tmp_path / f"rank{r}.npy") for r in range(2))
    np.testing.assert_array_equal(rank0, rank1)  # every network bit-identical across ranks
    np.testing.assert_allclose(rank0, expected, rtol=0, atol=1e-5)
    assert np.abs(expected - before).max() > 1e-3  # the steps really moved the weights


def test_squashed_log_prob_is_the_change_of_variables() -> None:
    sac = make_sac()
    obs, noise = torch.randn(64, OBS), torch.randn(64, ACT)
    action, log_prob = sac.actor.sample(obs, noise)
    mean, log_std = sac.actor(obs)
    gaussian = torch.distributions.Normal(mean, log_std.exp())
    pre_tanh = mean + log_std.exp() * noise
    naive = gaussian.log_prob(pre_tanh).sum(-1) - torch.log(1 - torch.tanh(pre_tanh) ** 2).sum(-1)
    torch.testing.assert_close(log_prob, naive, rtol=1e-4, atol=1e-4)
    assert action.abs().max() < 1.0


def test_targets_follow_by_polyak_steps_and_a_fixed_temperature_stays() -> None:
    sac = make_sac(ent_coef=0.2, tau=0.25)
    (batch, noise), *_ = batches()
    target_before = torch.cat([p.detach().reshape(-1) for p in sac.critic_target.parameters()]).clone()
    stats = sac.gradient_step(batch, noise)
    online = torch.cat([p.detach().reshape(-1) for p in sac.critic.parameters()])
    target = torch.cat([p.detach().reshape(-1) for p in sac.critic_target.parameters()])
    torch.testing.assert_close(target, target_before + 0.25 * (online - target_before))
    assert math.isclose(stats["alpha"], 0.2, rel_tol=1e-6) and "alpha_loss" not in stats


def test_action_scale_round_trips_the_bounds() -> None:
    scale = ActionScale(ACTIONS)
    unit = torch.tensor([[-1.0, -1.0], [1.0, 1.0], [0.0, 0.0]])
    torch.testing.assert_close(scale.to_env(unit), torch.tensor([[-2.0, 0.0], [2.0, 1.0], [0.0, 0.5]]))
    torch.testing.assert_close(scale.to_unit(scale.to_env(unit)), unit)
