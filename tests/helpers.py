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

    def start(self) -> None:
        server = subprocess.Popen(
            [sys.executable, "-m", "tests.preloaded_cli"], cwd=REPO, env=clean_env(), bufsize=0,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )  # fmt: skip
        atexit.register(server.kill)
        self.server = server
        assert self.message(None) == {"ready": 1}

    def message(self, timeout: float | None) -> dict[str, int] | None:
        """The server's next message, or None after ``timeout`` seconds without one. Read a byte
        at a time so that nothing of the message after it is taken early."""
        assert self.server is not None and self.server.stdout is not None
        fd, line = self.server.stdout.fileno(), b""
        while not line.endswith(b"\n"):
            if not select.select([fd], [], [], timeout)[0]:
                return None
            byte = os.read(fd, 1)
            assert byte, "tests/preloaded_cli.py ended"
            line += byte
        return json.loads(line)

    def run(self, args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
        if self.server is None or self.server.poll() is not None:
            self.start()
        assert self.server is not None and self.server.stdin is not None
        with tempfile.TemporaryDirectory() as tmp:
            out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
            out.touch()
            err.touch()
            request = {"argv": args, "cwd": str(cwd), "env": clean_env(), "out": str(out), "err": str(err)}
            self.server.stdin.write(json.dumps(request).encode() + b"\n")
            started = self.message(None)
            assert started is not None
            ended = self.message(timeout)
            if ended is None:
                os.killpg(started["pid"], signal.SIGKILL)
                self.message(None)
            argv, stdout, stderr = ["distrl", *args], out.read_text(), err.read_text()
            if ended is None:
                raise subprocess.TimeoutExpired(argv, timeout, stdout, stderr)
            return subprocess.CompletedProcess(argv, ended["code"], stdout, stderr)


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
