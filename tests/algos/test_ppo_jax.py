"""JAX PPO math: 2 processes through distrl's JAX launcher, each holding half the envs, end with
identical parameters equal to 1 process's update on the whole batch."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from distrl.io import checkpoint as ckpt
from tests.helpers import jax_launch

pytest.importorskip("jax", reason="the jax extra is installed by make test")

from distrl.comm.jax_comm import JaxComm  # noqa: E402
from tests.algos.jax_update_worker import write_update  # noqa: E402

WORKER = str(Path(__file__).with_name("jax_update_worker.py"))


def _run_one(out: Path) -> None:
    """The one-process update in this process (a one-device mesh, as a lone launched process
    gets): no interpreter to start and import JAX in, as a subprocess would need."""
    out.mkdir()
    write_update(JaxComm(), out)


def _run_two(out: Path) -> None:
    out.mkdir()
    result = jax_launch(2, WORKER, str(out))
    assert result.returncode == 0, result.stderr[-3000:]


def _params(path: Path) -> dict[str, torch.Tensor]:
    return ckpt.tensors_from_bytes(path.read_bytes())


@pytest.mark.slow
def test_two_processes_take_the_one_process_step_on_the_whole_batch(tmp_path: Path) -> None:
    _run_one(tmp_path / "one")
    _run_two(tmp_path / "two")
    reference = _params(tmp_path / "one" / "rank0.safetensors")
    rank0, rank1 = (_params(tmp_path / "two" / f"rank{r}.safetensors") for r in range(2))
    before = _params(tmp_path / "one" / "rank0_before.safetensors")
    moved = max(float((value - before[name]).abs().max()) for name, value in reference.items())
    assert moved > 1e-3  # the update did something worth comparing
    for name, value in reference.items():
        torch.testing.assert_close(rank0[name], rank1[name], rtol=0, atol=0)  # bit-identical ranks
        # float32 sums in another order: agreement to 1e-5 of a step that moved them by more.
        torch.testing.assert_close(rank0[name], value, rtol=0, atol=1e-5)
    # Adam's step barely changes when every gradient is scaled alike: the norm of the summed
    # gradient is what shows it is the sample-weighted mean over ranks, not a multiple of it.
    norms = [float((tmp_path / run / "rank0_grad_norm.txt").read_text()) for run in ("one", "two")]
    assert norms[1] == pytest.approx(norms[0], rel=1e-5)
