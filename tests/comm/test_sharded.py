"""Sharded learners on real gloo groups: FSDP2 and HSDP steps against one process's step on the
whole batch, and weights gathered for forward passes each rank runs a number of its own."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from distrl.algos.flat_gradients import GradientSync, gradients_for
from distrl.comm import TorchComm
from distrl.comm.sharded import gathered
from distrl.errors import UserError
from distrl.io.shards import full_tensor
from tests.distributed import run_ranks

ROWS = (3, 5, 0, 8)
"""Each rank's samples per step: unequal, one rank with none."""
STEPS = 5


class Stack(nn.Module):
    """Layers in an ``nn.ModuleList``: each is a unit of its own when sharded."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(5, 9), nn.Linear(9, 9), nn.Linear(9, 3)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers[:-1]:
            x = torch.tanh(layer(x))
        return self.layers[-1](x)


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(step)
    return torch.randn(sum(ROWS), 5, generator=gen), torch.randn(sum(ROWS), 3, generator=gen)


def train(net: nn.Module, rows: slice, sync: GradientSync | None) -> tuple[np.ndarray, list[float]]:
    """STEPS clipped Adam steps on the mean squared error of ``rows`` of each batch."""
    grads = gradients_for(list(net.parameters()))
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2, fused=True)
    norms = []
    for step in range(STEPS):
        x, y = (t[rows] for t in batch(step))
        loss = (net(x) - y).pow(2).mean()
        norms.append(grads.step(loss, optimizer, sync, len(x), max_grad_norm=0.5))
    weights = torch.cat([full_tensor(p.detach()).reshape(-1) for p in net.parameters()]).numpy()
    return weights, norms


def _sharded_rank(comm: TorchComm, sharding: str, out: Path) -> None:
    torch.manual_seed(0)
    net = Stack()
    comm.ranks_per_node = 2  # 4 processes as 2 nodes of 2: HSDP's replicate x shard mesh
    comm.shard_(net, sharding)
    first = sum(ROWS[: comm.rank])
    weights, norms = train(net, slice(first, first + ROWS[comm.rank]), comm.sum_gradients_)
    np.save(out / f"rank{comm.rank}.npy", weights)
    np.save(out / f"norms{comm.rank}.npy", norms)


@pytest.mark.parametrize("sharding", ["fsdp", "hsdp"])
def test_four_sharded_ranks_take_the_one_process_steps(tmp_path: Path, sharding: str) -> None:
    torch.manual_seed(0)
    expected, expected_norms = train(Stack(), slice(None), None)
    run_ranks(_sharded_rank, 4, sharding, tmp_path)
    for rank in range(4):
        np.testing.assert_allclose(np.load(tmp_path / f"rank{rank}.npy"), expected, atol=1e-6, rtol=0)
        np.testing.assert_allclose(np.load(tmp_path / f"norms{rank}.npy"), expected_norms, rtol=1e-5)
    assert max(expected_norms) > 0.5  # the clip was at work


def _acting_rank(comm: TorchComm, out: Path) -> None:
    torch.manual_seed(0)
    net = Stack()
    comm.shard_(net, "fsdp")
    with gathered(net), torch.no_grad():  # no collective per pass: ranks may run any number
        outputs = [net(torch.ones(1, 5)) for _ in range(1 + 3 * comm.rank)]
    weights, _ = train(net, slice(2 * comm.rank, 2 * comm.rank + 2), comm.sum_gradients_)
    np.save(out / f"rank{comm.rank}.npy", np.concatenate([outputs[-1].numpy().ravel(), weights]))


def test_gathered_weights_let_ranks_act_apart_then_train_together(tmp_path: Path) -> None:
    run_ranks(_acting_rank, 2, tmp_path)
    torch.manual_seed(0)
    net = Stack()
    with torch.no_grad():
        acted = net(torch.ones(1, 5)).numpy().ravel()
    expected, _ = train(net, slice(0, 4), None)  # the two ranks' 2 rows each
    for rank in range(2):
        saved = np.load(tmp_path / f"rank{rank}.npy")
        np.testing.assert_allclose(saved[:3], acted, atol=1e-6)
        np.testing.assert_allclose(saved[3:], expected, atol=1e-6, rtol=0)


def test_hsdp_on_one_node_is_refused(tmp_path: Path) -> None:
    run_ranks(_refused_rank, 2, tmp_path)
    assert (tmp_path / "said").read_text().startswith("train.sharding=hsdp replicates across nodes")


def _refused_rank(comm: TorchComm, out: Path) -> None:
    comm.ranks_per_node = 2
    with pytest.raises(UserError) as said:
        comm.shard_(Stack(), "hsdp")
    (out / "said").write_text(str(said.value))


def _bf16_rank(comm: TorchComm, out: Path) -> None:
    torch.manual_seed(0)
    net = Stack()
    comm.shard_(net, "fsdp", param_dtype=torch.bfloat16)
    computed = []
    net.layers[1].register_forward_hook(lambda layer, inputs, output: computed.append(output.dtype))
    x, y = (t[2 * comm.rank : 2 * comm.rank + 2] for t in batch(0))
    grads = gradients_for(list(net.parameters()))
    before = torch.cat([full_tensor(p.detach()).reshape(-1) for p in net.parameters()])
    loss = (net(x).float() - y).pow(2).mean()
    grads.step(loss, torch.optim.SGD(net.parameters(), lr=1.0), comm.sum_gradients_, len(x), 1e9)
    after = torch.cat([full_tensor(p.detach()).reshape(-1) for p in net.parameters()])
    assert computed == [torch.bfloat16]
    assert {(p.dtype, p.grad.dtype) for p in net.parameters()} == {(torch.float32, torch.float32)}
    np.save(out / f"rank{comm.rank}.npy", (before - after).numpy())


def test_bf16_sharded_ranks_compute_in_bf16_and_keep_float32_shards(tmp_path: Path) -> None:
    """``param_dtype``: weights gathered and computed with in bfloat16; the shards, their
    gradients (reduced in float32) and the step stay float32. The step is the gradient of the
    mean over both ranks' rows of a bfloat16 copy of the network, to bfloat16's precision."""
    run_ranks(_bf16_rank, 2, tmp_path)
    torch.manual_seed(0)
    net = Stack().to(torch.bfloat16)
    x, y = (t[:4] for t in batch(0))
    (net(x.to(torch.bfloat16)).float() - y).pow(2).mean().backward()
    expected = torch.cat([p.grad.float().reshape(-1) for p in net.parameters()]).numpy()
    for rank in range(2):
        step = np.load(tmp_path / f"rank{rank}.npy")
        np.testing.assert_allclose(step, expected, atol=2e-2 * np.abs(expected).max(), rtol=0)


def _held_rank(comm: TorchComm, hold: bool, out: Path) -> None:
    torch.manual_seed(0)
    net = Stack()
    comm.shard_(net, "fsdp")
    grads = gradients_for(list(net.parameters()), held_in=net if hold else None)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    x, y = (t[4 * comm.rank : 4 * comm.rank + 4] for t in batch(0))
    reduced_before = []  # per micro-batch: whether the shards had gradients when it began

    def part_loss(rows: slice) -> tuple[torch.Tensor, float]:
        reduced_before.append(all(p.grad is not None for p in net.parameters()))
        return (net(x[rows]) - y[rows]).pow(2).mean(), float(len(x[rows]))

    parts = [slice(0, 1), slice(1, 3), slice(3, 4)]
    grads.accumulated_step(
        [lambda rows=rows: part_loss(rows) for rows in parts], optimizer, comm.sum_gradients_, 0.5
    )
    weights = torch.cat([full_tensor(p.detach()).reshape(-1) for p in net.parameters()])
    np.save(out / f"rank{comm.rank}.npy", weights.numpy())
    np.save(out / f"reduced{comm.rank}.npy", reduced_before)


@pytest.mark.parametrize("hold", [False, True], ids=["reduced-each-micro-batch", "held-to-the-last"])
def test_accumulated_micro_batches_take_the_whole_batch_step(tmp_path: Path, hold: bool) -> None:
    """3 micro-batches of 1, 2 and 1 rows on each of 2 ranks: one Adam step on all 8 rows, with
    the gradients reduce-scattered after each micro-batch or held whole until the last."""
    run_ranks(_held_rank, 2, hold, tmp_path)
    torch.manual_seed(0)
    net = Stack()
    grads = gradients_for(list(net.parameters()))
    x, y = (t[:8] for t in batch(0))
    grads.step((net(x) - y).pow(2).mean(), torch.optim.Adam(net.parameters(), lr=1e-2), None, 8, 0.5)
    expected = torch.cat([p.detach().reshape(-1) for p in net.parameters()]).numpy()
    for rank in range(2):
        np.testing.assert_allclose(np.load(tmp_path / f"rank{rank}.npy"), expected, atol=1e-6, rtol=0)
        reduced = np.load(tmp_path / f"reduced{rank}.npy").tolist()
        assert reduced == ([False, False, False] if hold else [False, True, True])
