import pytest
import torch

from distrl.storage.rollout import RolloutBatch, RolloutStorage, compute_gae
from tests.helpers import DEVICES


def test_gae_matches_values_worked_out_by_hand() -> None:
    # One env, three steps; the episode ends after step 1 (dones[1] = 1).
    rewards = torch.tensor([[1.0], [2.0], [3.0]])
    values = torch.tensor([[0.5], [1.0], [1.5]])
    dones = torch.tensor([[0.0], [1.0], [0.0]])
    last_values = torch.tensor([2.0])
    gamma, lam = 0.9, 0.8
    # t=2: delta = 3 + 0.9*2 - 1.5 = 3.3                      adv = 3.3
    # t=1: delta = 2 - 1.0 = 1.0 (no bootstrap past the end)   adv = 1.0
    # t=0: delta = 1 + 0.9*1.0 - 0.5 = 1.4                    adv = 1.4 + 0.72*1.0 = 2.12
    adv, ret = compute_gae(rewards, values, dones, last_values, gamma, lam)
    torch.testing.assert_close(adv, torch.tensor([[2.12], [1.0], [3.3]]))
    torch.testing.assert_close(ret, adv + values)


def test_gae_with_lambda_one_is_discounted_return_minus_value() -> None:
    rewards = torch.ones(4, 2)
    values = torch.zeros(4, 2)
    dones = torch.zeros(4, 2)
    adv, _ = compute_gae(rewards, values, dones, torch.zeros(2), gamma=0.5, gae_lambda=1.0)
    torch.testing.assert_close(adv[:, 0], torch.tensor([1.875, 1.75, 1.5, 1.0]))


def test_a_rollout_cut_short_yields_only_its_steps_bootstrapped_from_where_it_stopped() -> None:
    storage = RolloutStorage(8, 2, 3, (), torch.int64, torch.device("cpu"))
    for t in range(3):  # a straggler stopped after 3 of 8 steps
        storage.add(
            torch.full((2, 3), float(t)),
            torch.tensor([t, t]),
            torch.zeros(2),
            torch.full((2,), 0.5),
            torch.ones(2),
            torch.zeros(2),
            torch.zeros(2, 0),
        )
    batch = storage.segment(torch.full((2,), 2.0), torch.zeros(2, dtype=torch.bool), False, 0).batch(
        gamma=0.5, gae_lambda=1.0
    )
    assert len(batch) == 6 and batch.obs[:, 0].tolist() == [0, 0, 1, 1, 2, 2]
    # Returns bootstrap from V = 2 after step 3: 1 + 0.5 * (1 + 0.5 * (1 + 0.5 * 2)).
    torch.testing.assert_close(batch.returns[:2], torch.tensor([2.0, 2.0]))
    assert storage.step == 0


@pytest.mark.parametrize("device", DEVICES)
def test_a_minibatch_is_the_indexed_rows_with_indices_from_the_cpu(device: str) -> None:
    rows = torch.arange(10.0, device=device)
    batch = RolloutBatch(rows.unsqueeze(-1).expand(10, 3), *(rows + k for k in range(5)))
    idx = torch.tensor([7, 2, 2, 9])  # the samplers draw on the CPU whatever the device
    minibatch = batch.chunks(idx)
    expected = torch.tensor([7.0, 2.0, 2.0, 9.0], device=device)
    torch.testing.assert_close(minibatch.obs, expected.unsqueeze(-1).expand(4, 3))
    for k, (_, field) in enumerate(minibatch._tensors()[1:]):
        torch.testing.assert_close(field, expected + k)
