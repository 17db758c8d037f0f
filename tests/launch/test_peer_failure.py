"""A rank that dies or hangs makes the others fail with a clear message within the timeout."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.distributed import free_port
from tests.helpers import CARTPOLE, GRPO_REVERSE, clean_env

TIMEOUT_S = 10


def start_slurm_style_ranks(run_dir: Path, *training: str) -> list[subprocess.Popen]:
    port = free_port()
    procs = []
    for rank in range(2):
        env = {
            **clean_env(),
            "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": str(rank),
            "SLURM_NTASKS": "2",
            "SLURM_JOB_NODELIST": "localhost",
            "MASTER_PORT": str(port),
        }
        cmd = [
            sys.executable, "-m", "distrl.train", *(training or ("--config", str(CARTPOLE))),
            "--run-dir", str(run_dir), "--total-steps", "100000000", "train.stop_return=null",
            f"comm.timeout_s={TIMEOUT_S}", "--distributed",
        ]  # fmt: skip
        procs.append(subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True))
    return procs


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
    survivor, victim = start_slurm_style_ranks(tmp_path, *training)
    metrics = tmp_path / "metrics.jsonl"
    deadline = time.monotonic() + 120
    while not (metrics.is_file() and len(metrics.read_text().splitlines()) >= 3):
        assert time.monotonic() < deadline and survivor.poll() is None
        time.sleep(0.1)
    victim.send_signal(fault)
    start = time.monotonic()
    try:
        _, stderr = survivor.communicate(timeout=TIMEOUT_S + 60)
    finally:
        victim.kill()
        victim.communicate()
    assert time.monotonic() - start < TIMEOUT_S + 30
    assert survivor.returncode == 3, stderr[-2000:]
    lines = stderr.strip().splitlines()
    assert lines[-1].startswith("distrl: error: rank 0: ")
    assert "another rank died, hung past comm.timeout_s or became unreachable" in lines[-1]
    assert lines[-1].endswith("rank 1 did not say its collective failed: it died, hung or was cut off")
    assert "Traceback" not in stderr
    assert json.loads(metrics.read_text().splitlines()[-1])["global_step"] > 0
