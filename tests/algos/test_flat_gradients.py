import copy

import pytest
import torch
from torch import nn

from distrl.algos.flat_gradients import FlatGradients


def make_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))


def backward(net: nn.Module, seed: int = 1) -> None:
    gen = torch.Generator().manual_seed(seed)
    net(torch.randn(16, 5, generator=gen)).pow(2).mean().backward()


def test_gradients_land_in_the_flat_buffer_and_match_plain_autograd() -> None:
    plain, flat_net = make_net(), make_net()
    grads = FlatGradients(list(flat_net.parameters()))
    for _ in range(2):  # the second pass checks zero_() keeps the views
        grads.zero_()
        plain.zero_grad()
        backward(plain)
        backward(flat_net)
    expected = torch.cat([p.grad.reshape(-1) for p in plain.parameters()])
    torch.testing.assert_close(grads.flat, expected, rtol=0, atol=0)
    storage = grads.bucket.untyped_storage().data_ptr()
    assert all(p.grad.untyped_storage().data_ptr() == storage for p in flat_net.parameters())
    assert grads.bucket.numel() == expected.numel() + 1


def test_clip_matches_torch_clip_grad_norm() -> None:
    plain, flat_net = make_net(), make_net()
    grads = FlatGradients(list(flat_net.parameters()))
    backward(plain)
    backward(flat_net)
    expected_norm = nn.utils.clip_grad_norm_(plain.parameters(), 0.1)
    norm = grads.clip_norm_(0.1)
    assert norm == pytest.approx(float(expected_norm), rel=1e-6)
    assert float(torch.linalg.vector_norm(grads.flat)) == pytest.approx(0.1, rel=1e-4)
    torch.testing.assert_close(grads.flat, torch.cat([p.grad.reshape(-1) for p in plain.parameters()]))


def test_non_finite_gradient_reports_a_non_finite_norm() -> None:
    net = make_net()
    grads = FlatGradients(list(net.parameters()))
    backward(net)
    grads.flat[3] = float("nan")
    assert grads.clip_norm_(1.0) != grads.clip_norm_(1.0)  # NaN


def test_average_weights_by_samples_through_the_sync_hook() -> None:
    """Two 'ranks' simulated by a hook that adds the other rank's bucket: the weighted mean."""
    net = make_net()
    grads = FlatGradients(list(net.parameters()))
    backward(net)
    mine = grads.flat.clone()
    other_flat = torch.randn_like(mine)
    other_bucket = torch.cat([other_flat * 30.0, torch.tensor([30.0])])
    grads.average_(lambda bucket: bucket.add_(other_bucket), weight=10.0)
    torch.testing.assert_close(grads.flat, (mine * 10.0 + other_flat * 30.0) / 40.0)


def test_mixed_dtypes_are_refused() -> None:
    net = make_net()
    half = copy.deepcopy(net).double()
    with pytest.raises(ValueError, match="one device with one dtype"):
        FlatGradients([*net.parameters(), *half.parameters()])
