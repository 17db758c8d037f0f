"""The memory options that are not an algorithm's own: a GPU memory fraction per process, and
the optimiser's state offloaded to the CPU."""

from __future__ import annotations

import pytest
import torch

from distrl.config.sections import TrainConfig
from distrl.entry import apply_cuda_options
from distrl.offload import OffloadedOptimizer, optimizer_for


def test_cuda_options_on_the_cpu_are_one_line_each(capsys: pytest.CaptureFixture[str]) -> None:
    train = TrainConfig(cuda_memory_fraction=0.5, optimizer_offload=True)
    apply_cuda_options(train, torch.device("cpu"), rank=0)
    tail = "applies to CUDA devices; this run is on cpu, where it does nothing"
    assert capsys.readouterr().err.splitlines() == [
        f"distrl: train.cuda_memory_fraction=0.5 {tail}",
        f"distrl: train.optimizer_offload=true {tail}",
    ]
    apply_cuda_options(train, torch.device("cpu"), rank=1)
    assert capsys.readouterr().err == ""  # said once per run, by rank 0


def _adam(params: list[torch.Tensor]) -> torch.optim.Optimizer:
    return torch.optim.AdamW(params, lr=0.1, weight_decay=0.01)


def _train(optimizer_of, device: torch.device) -> tuple[list[torch.Tensor], dict]:
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 3).to(device)
    optimizer = optimizer_of(list(net.parameters()))
    for step in range(5):
        net.zero_grad()
        net(torch.randn(8, 4, device=device)).square().mean().backward()
        optimizer.step()
        if step == 2:  # a checkpoint written and read back mid-run changes nothing
            optimizer.load_state_dict(optimizer.state_dict())
    return [p.detach().cpu() for p in net.parameters()], optimizer.state_dict()


def test_an_offloaded_optimizer_steps_as_the_optimizer_it_wraps() -> None:
    cpu = torch.device("cpu")
    plain, plain_state = _train(_adam, cpu)
    offloaded, offloaded_state = _train(lambda params: OffloadedOptimizer(params, _adam), cpu)
    for a, b in zip(plain, offloaded, strict=True):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=0)
    assert offloaded_state["state"].keys() == plain_state["state"].keys()  # checkpoints alike
    assert not isinstance(
        optimizer_for([torch.nn.Parameter(torch.zeros(1))], _adam, offload=True), OffloadedOptimizer
    )


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_offloaded_state_stays_in_cpu_memory_for_a_cuda_model() -> None:
    cuda = torch.device("cuda", 0)
    plain, _ = _train(_adam, cuda)
    offloaded, state = _train(lambda params: optimizer_for(params, _adam, offload=True), cuda)
    for a, b in zip(plain, offloaded, strict=True):
        torch.testing.assert_close(b, a, atol=1e-5, rtol=0)
    moments = [t for per_param in state["state"].values() for t in per_param.values() if t.dim() > 0]
    assert moments and all(t.device.type == "cpu" for t in moments)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_memory_fraction_caps_what_a_process_may_allocate() -> None:
    device = torch.device("cuda", 0)
    total = torch.cuda.get_device_properties(device).total_memory
    apply_cuda_options(TrainConfig(cuda_memory_fraction=0.1), device, rank=0)
    try:
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(int(total * 0.2), dtype=torch.uint8, device=device)
        torch.empty(int(total * 0.05), dtype=torch.uint8, device=device)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, device)
        torch.cuda.empty_cache()


def test_grpo_takes_optimizer_offload_and_ppo_refuses_it() -> None:
    from distrl.config.run import load_config
    from distrl.errors import UserError
    from tests.helpers import CARTPOLE, REPO

    assert load_config(
        REPO / "configs" / "grpo_reverse.yaml", ["train.optimizer_offload=true"]
    ).train.optimizer_offload
    with pytest.raises(UserError, match="train.optimizer_offload=true is not supported by algo.name=ppo"):
        load_config(CARTPOLE, ["train.optimizer_offload=true"])
