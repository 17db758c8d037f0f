import pytest
import torch
from torch import nn

from distrl.models.linear import Linear


def _pair(n_in: int, n_out: int, bias: bool = True) -> tuple[Linear, nn.Linear]:
    ours = Linear(n_in, n_out, bias=bias)
    reference = nn.Linear(n_in, n_out, bias=bias)
    reference.load_state_dict(ours.state_dict())
    return ours, reference


def _grads(
    layer: nn.Linear, x: torch.Tensor, input_grad: bool = True
) -> tuple[torch.Tensor, list[torch.Tensor | None]]:
    x = x.clone().requires_grad_(input_grad)
    out = layer(x)
    (out * torch.linspace(-1.0, 1.0, out.shape[-1])).sum().backward()
    return out, [x.grad, *(p.grad for p in layer.parameters())]


@pytest.mark.parametrize(
    ("n_in", "n_out", "shape", "bias", "input_grad"),
    [
        (4, 32, (512,), True, True),
        (4, 32, (512,), True, False),  # a network's first layer: observations need no gradient
        (17, 64, (3, 8), True, True),
        (6, 16, (40,), False, True),
        (32, 2, (64,), True, True),
    ],
)
def test_gradients_match_nn_linear(
    n_in: int, n_out: int, shape: tuple[int, ...], bias: bool, input_grad: bool
) -> None:
    torch.manual_seed(0)
    ours, reference = _pair(n_in, n_out, bias)
    x = torch.randn(*shape, n_in)
    out, grads = _grads(ours, x, input_grad)
    expected_out, expected_grads = _grads(reference, x, input_grad)
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


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_a_widening_layer_keeps_nn_linears_backward() -> None:
    layer = Linear(4, 32).cuda()
    assert "WideningLinear" not in type(layer(torch.randn(8, 4, device="cuda")).grad_fn).__name__
