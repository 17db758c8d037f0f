"""The communicator's collectives on a real 2-rank gloo group, against single-process answers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from distrl.comm import TorchComm
from distrl.comm.buckets import BROADCAST_BUCKET_BYTES
from distrl.errors import UserError
from distrl.models.normalizer import RunningMeanStd, batch_moments
from tests.distributed import run_ranks

# Different sizes per rank, so an unweighted merge would be caught.
ROWS_PER_RANK = (7, 13)


def rank_data(rank: int, update: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(100 * update + rank)
    return torch.randn(ROWS_PER_RANK[rank], 3, generator=gen) * (rank + 1) + 5 * rank


def _merge_worker(comm: TorchComm, out: Path) -> None:
    rms = RunningMeanStd((3,))
    for update in range(3):
        rms.update_from_moments(*comm.merge_moments(*batch_moments(rank_data(comm.rank, update))))
    out.joinpath(f"rank{comm.rank}.json").write_text(
        json.dumps({k: v.tolist() for k, v in rms.state_dict().items()})
    )


def test_merged_normalizer_equals_statistics_of_concatenated_data(tmp_path: Path) -> None:
    run_ranks(_merge_worker, 2, tmp_path)
    every_row = torch.cat([rank_data(r, u) for u in range(3) for r in range(2)]).double()
    states = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert states[0] == states[1]  # bit-identical on both ranks
    np.testing.assert_allclose(states[0]["mean"], every_row.mean(0).numpy(), rtol=1e-12)
    np.testing.assert_allclose(states[0]["var"], every_row.var(0, unbiased=False).numpy(), rtol=1e-10)
    assert states[0]["count"] == every_row.shape[0]


def _collectives_worker(comm: TorchComm, out: Path) -> None:
    sums = comm.sum_scalars([comm.rank + 1.0, 10.0])
    gathered = comm.all_gather_bytes(b"x" * (comm.rank + 3))
    model = torch.nn.Linear(3, 2)
    torch.nn.init.constant_(model.weight, float(comm.rank))
    comm.broadcast_parameters_(model)
    try:
        comm.run_on_main(
            lambda: (_ for _ in ()).throw(
                UserError("bad input on rank 0\nsecond line", code="test-bad-input")
            )
        )
        error, code = "", ""
    except UserError as exc:
        error, code = str(exc), exc.code
    result = {
        "sums": sums,
        "gathered": [g.decode() for g in gathered],
        "weight": model.weight.flatten().tolist(),
        "error": error,
        "code": code,
        "payload": comm.run_on_main(lambda: b"from rank 0").decode(),
    }
    out.joinpath(f"rank{comm.rank}.json").write_text(json.dumps(result))


def test_collectives_agree_on_every_rank(tmp_path: Path) -> None:
    run_ranks(_collectives_worker, 2, tmp_path)
    for rank in range(2):
        result = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert result["sums"] == [3.0, 20.0]
        assert result["gathered"] == ["xxx", "xxxx"]
        assert result["weight"] == [0.0] * 6  # rank 0's weights everywhere
        assert result["error"] == "bad input on rank 0\nsecond line"
        assert result["code"] == "test-bad-input"  # the refusal's id reaches every rank
        assert result["payload"] == "from rank 0"


def test_single_process_comm_is_identity() -> None:
    comm = TorchComm()
    flat = torch.arange(4.0)
    assert comm.allreduce_mean_(flat) is flat
    assert comm.sum_scalars([1.5, 2.0]) == [1.5, 2.0]
    count, mean, m2 = comm.merge_moments(*batch_moments(torch.ones(5, 2)))
    assert count == 5 and mean.tolist() == [1.0, 1.0] and m2.tolist() == [0.0, 0.0]
    with pytest.raises(UserError, match="boom") as raised:
        comm.run_on_main(lambda: (_ for _ in ()).throw(UserError("boom", code="test-boom")))
    assert raised.value.code == "test-boom"


def _sum_worker(comm: TorchComm, out: Path) -> None:
    gen = torch.Generator().manual_seed(comm.rank)
    values = torch.randn(1000, generator=gen, dtype=torch.float32)
    comm.allreduce_sum_(values)
    np.save(out / f"rank{comm.rank}.npy", values.numpy())


@pytest.mark.parametrize("world_size", [2, 3, 4])
@pytest.mark.slow
def test_allreduce_sum_is_correct_and_bit_identical(tmp_path: Path, world_size: int) -> None:
    run_ranks(_sum_worker, world_size, tmp_path)
    expected = sum(
        torch.randn(1000, generator=torch.Generator().manual_seed(r), dtype=torch.float32).double()
        for r in range(world_size)
    ).numpy()
    results = [np.load(tmp_path / f"rank{r}.npy") for r in range(world_size)]
    for result in results[1:]:
        np.testing.assert_array_equal(result, results[0])
    np.testing.assert_allclose(results[0], expected, rtol=1e-5, atol=1e-5)


class MixedState(torch.nn.Module):
    """Parameters and buffers of several dtypes, one larger than a broadcast bucket."""

    def __init__(self, rank: int) -> None:
        super().__init__()
        self.small = torch.nn.Parameter(torch.full((3,), rank + 0.25))
        self.large = torch.nn.Parameter(torch.full((BROADCAST_BUCKET_BYTES // 4 + 5,), float(rank)))
        self.register_buffer("count", torch.tensor([2**60 + 1 + rank]))  # exact only as an int64
        self.register_buffer("mask", torch.tensor([True, rank == 0, False]))
        self.register_buffer("brain_float", torch.full((2,), rank + 0.5, dtype=torch.bfloat16))


def _mixed_worker(comm: TorchComm, out: Path) -> None:
    state = MixedState(comm.rank)
    comm.broadcast_parameters_(state)
    sent = MixedState(0)
    received, expected = state.state_dict(), sent.state_dict()
    out.joinpath(f"rank{comm.rank}").write_text(
        str([k for k in expected if not torch.equal(received[k], expected[k])])
    )


def test_parameters_and_buffers_of_every_dtype_arrive_exactly(tmp_path: Path) -> None:
    run_ranks(_mixed_worker, 2, tmp_path)
    assert [(tmp_path / f"rank{rank}").read_text() for rank in range(2)] == ["[]", "[]"]
