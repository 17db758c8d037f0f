"""TD3's gradient step: 2 ranks holding parts of every batch take exactly the steps 1 rank takes
on the whole batches; the critics regress on the clipped double-Q target of the smoothed target
action; the actor and both targets move only every ``policy_delay`` steps."""

from __future__ import annotations

import copy
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from distrl.algorithms.td3.config import TD3Config
from distrl.algorithms.td3.networks import DeterministicActor
from distrl.algorithms.td3.update import TD3
from distrl.comm import TorchComm
from distrl.config.sections import ModelConfig
from distrl.models.continuous import ActionScale, TwinQ
from distrl.timing import PhaseClock
from tests.algorithms.sac.test_update import ACT, ACTIONS, OBS, TOTAL, batches, part
from tests.distributed import run_ranks


def make_td3(comm: TorchComm | None = None, **overrides: object) -> TD3:
    torch.manual_seed(0)
    model = ModelConfig(hidden_sizes=[16, 16], activation="relu")
    observations = gym.spaces.Box(-1.0, 1.0, (OBS,))
    actor, critic = DeterministicActor(observations, ACTIONS, model), TwinQ(observations, ACT, model)
    targets = (copy.deepcopy(actor).requires_grad_(False), copy.deepcopy(critic).requires_grad_(False))
    cfg = TD3Config(name="td3", **{"learning_rate": 1e-2, "tau": 0.1, **overrides})
    sync = comm.sum_gradients_ if comm else None
    return TD3(actor, critic, targets, ActionScale(ACTIONS), cfg, sync, PhaseClock())


def flat(td3: TD3, *names: str) -> np.ndarray:
    names = names or ("actor", "critic", "actor_target", "critic_target")
    return torch.cat([p.detach().reshape(-1) for n in names for p in getattr(td3, n).parameters()]).numpy()


def _rank_steps(comm: TorchComm, split: int, out: Path) -> None:
    td3 = make_td3(comm)
    start, end = (0, split) if comm.rank == 0 else (split, TOTAL)
    for batch, (target_noise, _) in batches():
        rows, (noise,) = part(batch, (target_noise,), start, end)
        td3.gradient_step(rows, noise)
    np.save(out / f"rank{comm.rank}.npy", flat(td3))


def test_two_ranks_with_unequal_parts_of_each_batch_match_one_rank(tmp_path: Path) -> None:
    split = 7  # 7 and 17 samples: the shares weigh the ranks' gradients
    single = make_td3()
    before = flat(single)
    for batch, (target_noise, _) in batches():
        stats = single.gradient_step(batch, target_noise)
    expected = flat(single)
    assert stats["skipped_steps"] == 0.0

    run_ranks(_rank_steps, 2, split, tmp_path)
    rank0, rank1 = (np.load(tmp_path / f"rank{r}.npy") for r in range(2))
    np.testing.assert_array_equal(rank0, rank1)  # every network bit-identical across ranks
    np.testing.assert_allclose(rank0, expected, rtol=0, atol=1e-5)
    assert np.abs(expected - before).max() > 1e-3  # the steps really moved the weights


def test_the_critics_regress_on_the_smaller_target_of_the_smoothed_target_action() -> None:
    td3 = make_td3(target_policy_noise=0.5, target_noise_clip=0.3)
    batch, (target_noise, _) = batches()[0]
    target_noise = target_noise * 10  # most draws beyond the clip
    with torch.no_grad():
        smoothed = (td3.actor_target(batch.next_obs) + (0.5 * target_noise).clamp(-0.3, 0.3)).clamp(-1, 1)
        twin = td3.critic_target(batch.next_obs, smoothed)
        y = batch.returns + td3.cfg.gamma * (~batch.terminated) * torch.minimum(twin[:, 0], twin[:, 1])
        q = td3.critic(batch.obs, td3.scale.to_unit(batch.actions))
        expected = F.mse_loss(q[:, 0], y) + F.mse_loss(q[:, 1], y)
    stats = td3.gradient_step(batch, target_noise)
    assert stats["critic_loss"] == pytest.approx(float(expected), rel=1e-6)


def test_the_actor_and_both_targets_move_only_every_policy_delay_steps() -> None:
    td3 = make_td3(policy_delay=3)
    frozen = ("actor", "actor_target", "critic_target")
    moved = []
    for batch, (target_noise, _) in batches()[:3]:
        before, critic = flat(td3, *frozen), flat(td3, "critic")
        td3.gradient_step(batch, target_noise)
        assert np.abs(flat(td3, "critic") - critic).max() > 0  # the critics step every time
        moved.append(bool(np.abs(flat(td3, *frozen) - before).max() > 0))
    assert moved == [False, False, True]
