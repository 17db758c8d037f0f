"""Run distrl's command line as a user would: a real process, torchrun included.

``distrl(...)`` forks its process from a server that has imported torch and distrl once
(``tests/preloaded_cli.py``); everything else, and ``distrl(...)`` while another call of it is
running, starts a fresh interpreter."""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.distributed import free_port
from tests.stopping import kill_tree

REPO = Path(__file__).resolve().parents[1]
CARTPOLE = REPO / "configs" / "cartpole_ppo.yaml"
CARTPOLE_DQN = REPO / "configs" / "cartpole_dqn.yaml"
CARTPOLE_A2C = REPO / "configs" / "cartpole_a2c.yaml"
PENDULUM_SAC = REPO / "configs" / "pendulum_sac.yaml"
PENDULUM_TD3 = REPO / "configs" / "pendulum_td3.yaml"
CARTPOLE_MEMORY = REPO / "configs" / "cartpole_positions_lstm_ppo.yaml"
"""Positions-only CartPole with an LSTM policy."""
OFFLINE = REPO / "configs" / "cartpole_offline_dqn.yaml"
GRPO_REVERSE = REPO / "configs" / "grpo_reverse.yaml"
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
    output captured. A timeout (or an interrupt) kills the process and everything it started
    (torchrun's workers), not the process alone."""
    with subprocess.Popen(
        [sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd,
        env=clean_env() if env is None else env,
    ) as process:  # fmt: skip
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_tree(process.pid)
            # Bounded: a process that left the tree before it was read may hold the pipes open.
            stdout, stderr = process.communicate(timeout=10)
            raise subprocess.TimeoutExpired(process.args, timeout, stdout, stderr) from None
        except BaseException:
            kill_tree(process.pid)
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def distrl(
    *args: str, cwd: Path | None = None, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``python -m distrl ARGS`` in a clean environment unless ``env`` is given, output captured."""
    if not _PRELOADED.lock.acquire(blocking=False):
        return run_python("-m", "distrl", *args, cwd=cwd, timeout=timeout, env=env)
    try:
        return _PRELOADED.run(list(args), cwd or Path.cwd(), timeout, [clean_env() if env is None else env])[
            0
        ]
    finally:
        _PRELOADED.lock.release()


def train_ranks(nproc: int, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``distrl train ARGS --distributed`` on ``nproc`` ranks started with torchrun's variables
    (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ...) as its workers are, without its agent: for
    tests of what the ranks do together, not of torchrun (``torchrun_train``). Forked from the
    preloaded server; the result has the first failing rank's exit code, and every rank's output
    in rank order."""
    port = free_port()
    envs = [
        {**clean_env(), "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc),
         "LOCAL_WORLD_SIZE": str(nproc), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        for rank in range(nproc)
    ]  # fmt: skip
    argv = ["train", *args, "--distributed"]
    with _PRELOADED.lock:
        ranks = _PRELOADED.run(argv, Path.cwd(), timeout, envs)
    failed = [rank.returncode for rank in ranks if rank.returncode != 0]
    return subprocess.CompletedProcess(
        ["distrl", *argv], failed[0] if failed else 0, "".join(rank.stdout for rank in ranks),
        "".join(rank.stderr for rank in ranks),
    )  # fmt: skip


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

    def message(self, timeout: float | None) -> dict[str, Any] | None:
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

    def run(
        self, args: list[str], cwd: Path, timeout: float, envs: list[dict[str, str]]
    ) -> list[subprocess.CompletedProcess]:
        """``distrl ARGS`` in one process per environment of ``envs``, all at once."""
        if self.server is None or self.server.poll() is not None:
            self.start()
        assert self.server is not None and self.server.stdin is not None
        with tempfile.TemporaryDirectory() as tmp:
            outputs = [(Path(tmp) / f"{i}.out", Path(tmp) / f"{i}.err") for i in range(len(envs))]
            for path in (path for pair in outputs for path in pair):
                path.touch()
            processes = [
                {"env": env, "out": str(out), "err": str(err)}
                for env, (out, err) in zip(envs, outputs, strict=True)
            ]
            self.server.stdin.write(
                json.dumps({"argv": args, "cwd": str(cwd), "processes": processes}).encode() + b"\n"
            )
            started = self.message(None)
            assert started is not None
            try:
                ended = self.message(timeout)
            except BaseException:  # an interrupt: the server may be gone too, and is out of step
                self._kill(started["pids"])
                self.server.kill()
                self.server.wait()
                self.server = None
                raise
            if ended is None:
                self._kill(started["pids"])
                self.message(None)
            argv, read = ["distrl", *args], [(out.read_text(), err.read_text()) for out, err in outputs]
            if ended is None:
                raise subprocess.TimeoutExpired(argv, timeout, *read[0])
            return [
                subprocess.CompletedProcess(argv, code, *output)
                for code, output in zip(ended["codes"], read, strict=True)
            ]

    @staticmethod
    def _kill(pids: list[int]) -> None:
        """Kill the children ``pids`` with their process groups and everything they started."""
        for pid in pids:
            kill_tree(pid)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)


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


def children(pid: int) -> list[int]:
    """Live processes whose parent is ``pid`` (torchrun's workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry.name))
    return found
