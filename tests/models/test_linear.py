import pytest
import torch
from torch import nn

from distrl.models.linear import Linear


def _pair(n_in: int, n_out: int, bias: bool = True) -> tuple[Linear, nn.Linear]:
    ours = Linear(n_in, n_out, bias=bias)
    reference = nn.Linear(n_in, n_out, bias=bias)
    reference.load_state_dict(ours.state_dict())
    return ours, reference


def _grads(layer: nn.Linear, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    x = x.clone().requires_grad_(True)
    out = layer(x)
    (out * torch.linspace(-1.0, 1.0, out.shape[-1])).sum().backward()
    return out, [x.grad, *(p.grad for p in layer.parameters())]


@pytest.mark.parametrize(("n_in", "n_out", "shape"), [(4, 32, (512,)), (17, 64, (3, 8)), (32, 2, (64,))])
def test_gradients_match_nn_linear(n_in: int, n_out: int, shape: tuple[int, ...]) -> None:
    torch.manual_seed(0)
    ours, reference = _pair(n_in, n_out)
    x = torch.randn(*shape, n_in)
    out, grads = _grads(ours, x)
    expected_out, expected_grads = _grads(reference, x)
    torch.testing.assert_close(out, expected_out)
    for got, expected in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_only_a_widening_layer_with_a_weight_gradient_takes_its_own_backward() -> None:
    widening, narrowing = Linear(4, 32), Linear(32, 2)
    x = torch.randn(8, 4)
    assert "WideningLinear" in type(widening(x).grad_fn).__name__
    assert "WideningLinear" not in type(narrowing(torch.randn(8, 32)).grad_fn).__name__
    with torch.no_grad():
        assert widening(x).grad_fn is None
    widening.requires_grad_(False)
    assert widening(x).grad_fn is None  # frozen or exported: plain nn.Linear


def test_no_bias_and_compiled_gradients_match() -> None:
    torch.manual_seed(1)
    ours, reference = _pair(4, 16, bias=False)
    x = torch.randn(64, 4)
    _, grads = _grads(torch.compile(ours), x)
    _, expected = _grads(reference, x)
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
