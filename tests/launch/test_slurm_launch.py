"""The SLURM path with no torchrun: N processes started with exactly the variables srun sets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from distrl.io import checkpoint as ckpt
from tests.distributed import free_port
from tests.helpers import CARTPOLE, clean_env


@pytest.mark.slow
def test_two_srun_style_tasks_train_in_sync(tmp_path: Path) -> None:
    port = free_port()
    procs = []
    for rank in range(2):
        env = {
            **clean_env(),
            "SLURM_JOB_ID": "4242",
            "SLURM_PROCID": str(rank),
            "SLURM_LOCALID": str(rank),
            "SLURM_NTASKS": "2",
            "SLURM_NODEID": "0",
            "SLURM_JOB_NODELIST": "localhost",
            "MASTER_PORT": str(port),
        }
        cmd = [
            sys.executable, "-m", "distrl.train", "--config", str(CARTPOLE), "--run-dir", str(tmp_path),
            "--total-steps", "4096", "train.stop_return=null", "--distributed",
        ]  # fmt: skip
        procs.append(subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True))
    for proc in procs:
        _, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr[-3000:]
    state = json.loads((ckpt.resolve_checkpoint(tmp_path) / "state.json").read_text())
    assert state["world_size"] == 2 and state["global_step"] == 4096
    assert state["ranks"][0]["param_sha256"] == state["ranks"][1]["param_sha256"]
