"""Run distrl's command line as a user would: a real process, torchrun included.

``distrl(...)``, ``train_ranks(...)`` and ``start_distrl(...)`` (processes not waited for, for tests
that signal them as they run) fork their processes from a server that has imported torch and
distrl once (``tests/preloaded_cli.py``); everything else, and these while another call uses the
server, starts fresh interpreters."""

from __future__ import annotations

import abc
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
import time
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
    with start_distrl([(list(args), clean_env() if env is None else env)], cwd) as started:
        return started.communicate(timeout)[0]


def train_ranks(nproc: int, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``distrl train ARGS --distributed`` on ``nproc`` ranks (``start_ranks``), waited for: the
    result has the first failing rank's exit code, and every rank's output in rank order."""
    with start_ranks(nproc, *args) as started:
        ranks = started.communicate(timeout)
    failed = [rank.returncode for rank in ranks if rank.returncode != 0]
    return subprocess.CompletedProcess(
        ranks[0].args, failed[0] if failed else 0, "".join(rank.stdout for rank in ranks),
        "".join(rank.stderr for rank in ranks),
    )  # fmt: skip


def start_ranks(nproc: int, *args: str) -> Started:
    """``distrl train ARGS --distributed`` on ``nproc`` ranks started with torchrun's variables
    (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ...) as its workers are, without its agent: for
    tests of what the ranks do together, not of torchrun (``torchrun_train``)."""
    port = free_port()
    envs = [
        {**clean_env(), "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc),
         "LOCAL_WORLD_SIZE": str(nproc), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        for rank in range(nproc)
    ]  # fmt: skip
    return start_distrl([(["train", *args, "--distributed"], env) for env in envs])


def start_distrl(processes: list[tuple[list[str], dict[str, str]]], cwd: Path | None = None) -> Started:
    """``python -m distrl ARGV`` in one process per ``(ARGV, environment)`` of ``processes``, all
    started at once, not waited for: a ``Started`` to use as a context manager, which kills what
    still runs when it is left. Forked from the preloaded server, or, while another caller uses
    it, fresh interpreters (so that concurrent callers are safe)."""
    if _PRELOADED.lock.acquire(blocking=False):
        try:
            return _PRELOADED.start(processes, cwd or Path.cwd())
        except BaseException:
            _PRELOADED.lock.release()
            raise
    return FreshProcesses(processes, cwd)


class Started(abc.ABC):
    """Processes of ``start_distrl``: pids, exit codes as they end, output once they have, and
    every one killed (with whatever it started) on leaving the ``with`` block."""

    def __init__(self, processes: list[tuple[list[str], dict[str, str]]]) -> None:
        self.argvs = [["distrl", *argv] for argv, _ in processes]
        self._outputs = tempfile.TemporaryDirectory()
        self.outputs = [
            (Path(self._outputs.name) / f"{i}.out", Path(self._outputs.name) / f"{i}.err")
            for i in range(len(processes))
        ]
        for path in (path for pair in self.outputs for path in pair):
            path.touch()
        self.pids: list[int] = []
        self.codes: list[int | None] = [None] * len(processes)

    def poll(self, index: int) -> int | None:
        """Process ``index``'s exit code, None while it runs."""
        self._wait(index, 0)
        return self.codes[index]

    def wait(self, index: int, timeout: float) -> int:
        """Process ``index``'s exit code once it ends; ``subprocess.TimeoutExpired`` if it runs past
        ``timeout`` seconds (nothing killed: the ``with`` block's end does that)."""
        if not self._wait(index, timeout):
            raise subprocess.TimeoutExpired(self.argvs[index], timeout)
        code = self.codes[index]
        assert code is not None
        return code

    def result(self, index: int) -> subprocess.CompletedProcess:
        """Process ``index``'s exit code and output, once it has ended."""
        out, err = self.outputs[index]
        return subprocess.CompletedProcess(
            self.argvs[index], self.codes[index], out.read_text(), err.read_text()
        )

    def communicate(self, timeout: float) -> list[subprocess.CompletedProcess]:
        """Every process's result once all have ended; past ``timeout`` seconds, all of them killed
        and ``subprocess.TimeoutExpired`` with the first one's output."""
        deadline = time.monotonic() + timeout
        for index in range(len(self.codes)):
            if not self._wait(index, max(deadline - time.monotonic(), 0)):
                self.kill()
                first = self.result(0)
                raise subprocess.TimeoutExpired(first.args, timeout, first.stdout, first.stderr)
        return [self.result(index) for index in range(len(self.codes))]

    def kill(self) -> None:
        """Kill every process still running, its process group and everything it started, and wait
        for their ends."""
        self._kill_running()
        for index in range(len(self.codes)):
            assert self._wait(index, 30), f"{self.argvs[index]} outlived SIGKILL"

    def __enter__(self) -> Started:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: object) -> None:
        try:
            if kind is not None and not issubclass(kind, Exception):
                self._kill_running()  # an interrupt: stop at once, waiting on nothing
            else:
                self.kill()
        finally:
            self._outputs.cleanup()

    @abc.abstractmethod
    def _wait(self, index: int, timeout: float) -> bool:
        """Whether process ``index`` ended within ``timeout`` seconds (its code then in ``codes``)."""

    def _kill_running(self) -> None:
        """Kill every process still running (each in a session of its own: its process group and
        everything it started too), without waiting for them."""
        for pid, code in zip(self.pids, self.codes, strict=True):
            if code is None:
                kill_tree(pid)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGKILL)


class FreshProcesses(Started):
    """``start_distrl``'s processes as fresh interpreters, for when the preloaded server is busy."""

    def __init__(self, processes: list[tuple[list[str], dict[str, str]]], cwd: Path | None) -> None:
        super().__init__(processes)
        self.popens: list[subprocess.Popen] = []
        for (argv, env), (out, err) in zip(processes, self.outputs, strict=True):
            with out.open("w") as stdout, err.open("w") as stderr:
                popen = subprocess.Popen(
                    [sys.executable, "-m", "distrl", *argv], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                    stdout=stdout, stderr=stderr, start_new_session=True,
                )  # fmt: skip
            self.popens.append(popen)
        self.pids = [popen.pid for popen in self.popens]

    def _wait(self, index: int, timeout: float) -> bool:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.codes[index] = self.popens[index].wait(timeout)
        return self.codes[index] is not None


class PreloadedCli:
    """The client of ``tests/preloaded_cli.py``, started on first use, stopped at exit. One
    request at a time: ``lock`` is held from ``start`` until its ``ForkedProcesses`` ends."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.server: subprocess.Popen | None = None

    def start_server(self) -> None:
        server = subprocess.Popen(
            [sys.executable, "-m", "tests.preloaded_cli"], cwd=REPO, env=clean_env(), bufsize=0,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        )  # fmt: skip
        atexit.register(server.kill)
        self.server = server
        assert self.message(None) == {"ready": 1}

    def stop_server(self) -> None:
        """Kill the server (out of step with this client), to be started afresh on next use."""
        assert self.server is not None
        self.server.kill()
        self.server.wait()
        self.server = None

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

    def start(self, processes: list[tuple[list[str], dict[str, str]]], cwd: Path) -> ForkedProcesses:
        """``processes`` forked by the server; the caller holds ``lock``."""
        if self.server is None or self.server.poll() is not None:
            self.start_server()
        try:
            return ForkedProcesses(self, processes, cwd)
        except BaseException:
            self.stop_server()  # interrupted between the request and its answer: out of step
            raise


class ForkedProcesses(Started):
    """``start_distrl``'s processes forked by the preloaded server: each one's end is a message of
    the server's, read as it is waited for."""

    def __init__(
        self, client: PreloadedCli, processes: list[tuple[list[str], dict[str, str]]], cwd: Path
    ) -> None:
        super().__init__(processes)
        self.client = client
        assert client.server is not None and client.server.stdin is not None
        request = {
            "cwd": str(cwd),
            "processes": [
                {"argv": argv, "env": env, "out": str(out), "err": str(err)}
                for (argv, env), (out, err) in zip(processes, self.outputs, strict=True)
            ],
        }
        client.server.stdin.write(json.dumps(request).encode() + b"\n")
        started = client.message(None)
        assert started is not None
        self.pids = started["pids"]

    def _wait(self, index: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.codes[index] is None:
            message = self.client.message(max(deadline - time.monotonic(), 0))
            if message is None:
                return False
            self.codes[message["ended"]] = message["code"]
        return True

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: object) -> None:
        try:
            super().__exit__(kind, error, tb)
        finally:
            if kind is not None and not issubclass(kind, Exception):
                # An interrupt reaches the server's process group too: it may be gone, or out of step.
                self.client.stop_server()
            self.client.lock.release()


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
