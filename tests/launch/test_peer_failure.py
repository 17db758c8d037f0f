"""A rank that dies or hangs makes the others fail with a clear message within the timeout."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.distributed import free_port
from tests.helpers import CARTPOLE, GRPO_REVERSE, Started, clean_env, start_distrl

TIMEOUT_S = 10


def start_slurm_style_ranks(run_dir: Path, *training: str) -> Started:
    """Two ranks with SLURM's variables, forked as ``srun``'s tasks would start (how they are
    started is not what these tests are about: what the survivor does is)."""
    port = free_port()
    argv = [
        "train", *(training or ("--config", str(CARTPOLE))), "--run-dir", str(run_dir), "--total-steps",
        "100000000", "train.stop_return=null", f"comm.timeout_s={TIMEOUT_S}", "--distributed",
    ]  # fmt: skip
    envs = [
        {**clean_env(), "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank), "SLURM_NTASKS": "2",
         "SLURM_JOB_NODELIST": "localhost", "MASTER_PORT": str(port)}
        for rank in range(2)
    ]  # fmt: skip
    return start_distrl([(argv, env) for env in envs])


SHARDED_GRPO = ("--config", str(GRPO_REVERSE), "train.sharding=fsdp", "log.progress=false")
"""Collectives torch runs itself (FSDP's gathers and reduce-scatters), not distrl's."""


@pytest.mark.parametrize(
    "fault, training",
    [(signal.SIGKILL, ()), (signal.SIGSTOP, ()), (signal.SIGSTOP, SHARDED_GRPO)],
    ids=["dies", "hangs", "hangs-in-fsdp"],
)
@pytest.mark.slow
def test_survivor_fails_clearly_within_the_timeout(
    tmp_path: Path, fault: signal.Signals, training: tuple[str, ...]
) -> None:
    survivor, victim = 0, 1
    metrics = tmp_path / "metrics.jsonl"
    with start_slurm_style_ranks(tmp_path, *training) as ranks:
        deadline = time.monotonic() + 120
        while not (metrics.is_file() and len(metrics.read_text().splitlines()) >= 3):
            assert time.monotonic() < deadline and ranks.poll(survivor) is None
            time.sleep(0.1)
        os.kill(ranks.pids[victim], fault)
        start = time.monotonic()
        code = ranks.wait(survivor, timeout=TIMEOUT_S + 60)
        stderr = ranks.result(survivor).stderr
    # The victim is killed on leaving the block.
    assert time.monotonic() - start < TIMEOUT_S + 30
    assert code == 3, stderr[-2000:]
    lines = stderr.strip().splitlines()
    assert lines[-1].startswith("distrl: error: rank 0: ")
    assert "another rank died, hung past comm.timeout_s or became unreachable" in lines[-1]
    assert lines[-1].endswith("rank 1 did not say its collective failed: it died, hung or was cut off")
    assert "Traceback" not in stderr
    assert json.loads(metrics.read_text().splitlines()[-1])["global_step"] > 0
