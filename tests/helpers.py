"""Run distrl's command line as a user would: a real process, torchrun included.

``distrl(...)`` forks its process from a server that has imported torch and distrl once
(``tests/preloaded_cli.py``); everything else, and ``distrl(...)`` while another call of it is
running, starts a fresh interpreter."""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest
import torch

from tests.distributed import free_port

REPO = Path(__file__).resolve().parents[1]
CARTPOLE = REPO / "configs" / "cartpole_ppo.yaml"
CARTPOLE_DQN = REPO / "configs" / "cartpole_dqn.yaml"
CARTPOLE_A2C = REPO / "configs" / "cartpole_a2c.yaml"
PENDULUM_SAC = REPO / "configs" / "pendulum_sac.yaml"
CARTPOLE_MEMORY = REPO / "configs" / "cartpole_positions_lstm_ppo.yaml"
"""Positions-only CartPole with an LSTM policy."""
OFFLINE = REPO / "configs" / "cartpole_offline_dqn.yaml"
DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")),
]
"""The CPU, and a CUDA GPU where the machine has one (CI has none)."""
_LAUNCHER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID")


def clean_env() -> dict[str, str]:
    """This process's environment without launcher variables, one thread per process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(_LAUNCHER_VARS)}
    env["OMP_NUM_THREADS"] = "1"
    return env


def run_python(
    *args: str, cwd: Path | None = None, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``python ARGS`` in a clean environment (no launcher variables) unless ``env`` is given,
    output captured."""
    return subprocess.run(
        [sys.executable, *args],
        check=False,
        capture_output=True,
        text=True,
        cwd=cwd,
        env=clean_env() if env is None else env,
        timeout=timeout,
    )


def distrl(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m distrl ARGS`` in a clean environment, output captured."""
    if not _PRELOADED.lock.acquire(blocking=False):
        return run_python("-m", "distrl", *args, cwd=cwd, timeout=timeout)
    try:
        return _PRELOADED.run(list(args), cwd or Path.cwd(), timeout)
    finally:
        _PRELOADED.lock.release()


class PreloadedCli:
    """The client of ``tests/preloaded_cli.py``, started on first use, stopped at exit."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.server: subprocess.Popen | None = None

    def start(self) -> subprocess.Popen:
        server = subprocess.Popen(
            [sys.executable, "-m", "tests.preloaded_cli"], cwd=REPO, env=clean_env(), text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )  # fmt: skip
        assert server.stdout is not None and json.loads(server.stdout.readline()) == {"ready": 1}
        atexit.register(server.kill)
        return server

    def run(self, args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
        if self.server is None or self.server.poll() is not None:
            self.server = self.start()
        assert self.server.stdin is not None and self.server.stdout is not None
        with tempfile.TemporaryDirectory() as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            out.touch()
            err.touch()
            request = {"argv": args, "cwd": str(cwd), "env": clean_env(), "out": str(out), "err": str(err)}
            self.server.stdin.write(json.dumps(request) + "\n")
            self.server.stdin.flush()
            pid = json.loads(self.server.stdout.readline())["pid"]
            ready, _, _ = select.select([self.server.stdout], [], [], timeout)
            if not ready:
                os.killpg(pid, signal.SIGKILL)
                self.server.stdout.readline()
                raise subprocess.TimeoutExpired(["distrl", *args], timeout, out.read_text(), err.read_text())
            code = json.loads(self.server.stdout.readline())["code"]
            return subprocess.CompletedProcess(["distrl", *args], code, out.read_text(), err.read_text())


_PRELOADED = PreloadedCli()


def collect(out: Path, steps: int, rows_per_file: int, seed: int = 0) -> None:
    """``distrl collect``: ``steps`` random CartPole transitions into ``out``."""
    result = distrl(
        "collect", "--env", "CartPole-v1", "--steps", str(steps), "--out", str(out),
        "--rows-per-file", str(rows_per_file), "--seed", str(seed),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def torchrun_train(nproc: int, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m torch.distributed.run --nproc_per_node=N -m distrl.train ... --distributed``."""
    return run_python(
        "-m", "torch.distributed.run", "--nnodes=1", f"--nproc_per_node={nproc}", "--master_addr=127.0.0.1",
        f"--master_port={free_port()}", "-m", "distrl.train", *args, "--distributed", timeout=timeout,
    )  # fmt: skip


def jax_launch(nproc: int, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m distrl.launch.jax --nproc_per_node=N ARGS`` (ARGS: ``-m module ...`` or a
    script and its arguments) on a free coordinator port."""
    return run_python(
        "-m", "distrl.launch.jax", f"--nproc_per_node={nproc}",
        f"--coordinator_address=127.0.0.1:{free_port()}", *args, cwd=REPO, timeout=timeout,
    )  # fmt: skip
