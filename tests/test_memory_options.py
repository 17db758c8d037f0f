"""The memory options that are not an algorithm's own: a GPU memory fraction per process."""

from __future__ import annotations

import pytest
import torch

from distrl.entry import limit_gpu_memory


def test_a_memory_fraction_on_the_cpu_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    limit_gpu_memory(0.5, torch.device("cpu"), rank=0)
    assert capsys.readouterr().err == (
        "distrl: train.cuda_memory_fraction=0.5 applies to CUDA devices; "
        "this run is on cpu, where it does nothing\n"
    )
    limit_gpu_memory(0.5, torch.device("cpu"), rank=1)
    assert capsys.readouterr().err == ""  # said once per run, by rank 0


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_memory_fraction_caps_what_a_process_may_allocate() -> None:
    device = torch.device("cuda", 0)
    total = torch.cuda.get_device_properties(device).total_memory
    limit_gpu_memory(0.1, device, rank=0)
    try:
        with pytest.raises(torch.OutOfMemoryError):
            torch.empty(int(total * 0.2), dtype=torch.uint8, device=device)
        torch.empty(int(total * 0.05), dtype=torch.uint8, device=device)
    finally:
        torch.cuda.set_per_process_memory_fraction(1.0, device)
        torch.cuda.empty_cache()
