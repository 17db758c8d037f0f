"""A test run stops cleanly: SIGTERM to ``make test``'s process group, or Ctrl-C, ends pytest
within 30 s with no process it started left running (``tests/stopping.py``, wired in
conftest.py); and tests do not leak into each other: no test leaves a signal handler of its own
behind, nor the Ray head's variables in the environment."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterable
from pathlib import Path

import psutil
import pytest

from tests.helpers import REPO, clean_env
from tests.ray_cluster import RayHead
from tests.stopping import handlers_kept, running, stop, tree

STOP_S = 30
FOREGROUND = (
    "import os, signal, sys\n"
    "for sig in (signal.SIGINT, signal.SIGTERM):\n"
    "    signal.signal(sig, signal.SIG_DFL)\n"
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})\n"
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])\n"
)
"""``python -c FOREGROUND ARGS`` is ``python ARGS`` started with SIGINT and SIGTERM at their
default and unblocked, as a terminal's foreground job is: whatever this process inherited (a job
that a shell without job control put in the background ignores SIGINT, and its children with it)."""
RUNS = {
    "in_process": ["preloaded", "torchrun", "in-process"],
    "preloaded_run": ["preloaded", "torchrun"],
}
"""Each case of ``tests/clean_stop_cases.py``: the run dirs whose first metrics row says that all
its processes are busy."""


def _training(run_dir: Path) -> bool:
    metrics = run_dir / "metrics.jsonl"
    return metrics.is_file() and bool(metrics.read_text().strip())


@pytest.mark.slow
@pytest.mark.parametrize(
    ("sig", "case"),
    [
        pytest.param(signal.SIGTERM, "in_process", id="SIGTERM"),
        pytest.param(
            signal.SIGINT,
            "preloaded_run",
            id="SIGINT",
        ),
    ],
)
def test_a_signal_to_the_process_group_ends_the_run_with_every_process_it_started(
    tmp_path: Path, sig: signal.Signals, case: str
) -> None:
    """pytest in a process group of its own, as ``make test`` runs it, over the case's test and
    one that only a session going on after the signal reaches; the signal lands once every run
    in the case has logged a row. Every process the session started is tracked while it runs
    (the session's process tree, polled) and must be gone within ``STOP_S`` of the signal."""
    output = tmp_path / "pytest.out"
    env = {**clean_env(), "DISTRL_CLEAN_STOP_DIR": str(tmp_path)}
    cmd = [sys.executable, "-c", FOREGROUND, "-m", "pytest", "-q", "-p", "no:cacheprovider",
           "tests/clean_stop_cases.py", "-k", f"{case} or reached_only"]  # fmt: skip
    _warn_if_inherited_signals_differ()
    with output.open("w") as out:
        session = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    started: dict[int, psutil.Process] = {}

    def track() -> None:
        started.update((p.pid, p) for p in tree(session.pid))

    try:
        deadline = time.monotonic() + 240
        while not all(_training(tmp_path / name) for name in RUNS[case]):
            track()
            assert session.poll() is None, output.read_text()[-3000:]
            assert time.monotonic() < deadline, output.read_text()[-3000:]
            time.sleep(0.2)
        track()
        _assert_covered(case, session.pid, started.values())
        signal_state = _shown(_signal_masks(Path(f"/proc/{session.pid}/status")))
        os.killpg(session.pid, sig)
        signalled = time.monotonic()
        while session.poll() is None and time.monotonic() < signalled + STOP_S:
            track()
            time.sleep(0.1)
        if session.poll() is None:
            os.kill(session.pid, signal.SIGUSR2)  # its threads' stacks (clean_stop_cases.py)
            time.sleep(2)
            stacks = (tmp_path / "stacks.txt").read_text()
            pytest.fail(
                f"pytest still running {STOP_S} s after {sig.name} (its signals before: {signal_state}); "
                f"its threads:\n{stacks}\nits output:\n{output.read_text()[-4000:]}"
            )
        stopped_s = time.monotonic() - signalled
        while (left := [p for p in started.values() if running(p)]) and time.monotonic() < signalled + STOP_S:
            time.sleep(0.1)
        assert not left, f"still running {STOP_S} s after {sig.name}: {_described(left)}"
        report = output.read_text()
        assert session.returncode == pytest.ExitCode.INTERRUPTED, report[-3000:]
        assert "reached_only" not in report, report[-3000:]
        print(f"{sig.name}: pytest ended {stopped_s:.1f} s after it, {len(started)} processes with it")
    finally:
        stop([*tree(session.pid), *started.values()], grace_s=0)


def _warn_if_inherited_signals_differ() -> None:
    """Say so when this process ignores or blocks SIGINT or SIGTERM (what ``FOREGROUND`` undoes
    for the session under test): the pytest running this test was started that way."""
    masks = _signal_masks(Path("/proc/thread-self/status"))  # the mask is a thread's: this one's
    bits = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGTERM - 1))
    if (masks["SigIgn"] | masks["SigBlk"]) & bits:
        warnings.warn(
            f"this pytest process ignores or blocks SIGINT or SIGTERM ({_shown(masks)})", stacklevel=2
        )


def _signal_masks(status: Path) -> dict[str, int]:
    """The signals a process (or thread) blocks, ignores and catches, from its /proc status file."""
    fields = (line.partition(":\t") for line in status.read_text().splitlines())
    return {key: int(value, 16) for key, _, value in fields if key in ("SigBlk", "SigIgn", "SigCgt")}


def _shown(masks: dict[str, int]) -> str:
    return ", ".join(f"{key}: {mask:016x}" for key, mask in masks.items())


def _described(processes: Iterable[psutil.Process]) -> list[tuple[int, int, str]]:
    """(pid, session, command line) of each of ``processes`` still running."""
    described = []
    for process in processes:
        with contextlib.suppress(psutil.Error, OSError):
            # Whole: what is looked for in it may come late (torchrun's agent names its script
            # after its options, and the clone's path comes first).
            described.append((process.pid, os.getsid(process.pid), " ".join(process.cmdline())))
    return described


def _assert_covered(case: str, session_pid: int, processes: Iterable[psutil.Process]) -> None:
    """The processes the case is for are running: one in a session of its own (the preloaded
    CLI's child), torchrun's agent and two ranks, and for the in-process case the Ray head's
    raylet."""
    described = _described(p for p in processes if running(p))
    commands = [command for _, _, command in described]
    assert any(sid != session_pid for _, sid, _ in described), described
    assert sum("distrl.train" in command for command in commands) >= 3, described
    assert case != "in_process" or any("raylet" in command for command in commands), described


def test_a_handler_left_installed_fails_the_test_and_is_put_back() -> None:
    before = signal.getsignal(signal.SIGUSR1)
    with pytest.raises(pytest.fail.Exception, match="SIGUSR1: "), handlers_kept():
        signal.signal(signal.SIGUSR1, lambda signum, frame: None)
    assert signal.getsignal(signal.SIGUSR1) == before
    with handlers_kept():  # one restored in the body is no failure
        previous = signal.signal(signal.SIGALRM, lambda signum, frame: None)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.slow
def test_only_a_test_that_uses_the_ray_head_has_its_variables(
    ray_session_head: RayHead, request: pytest.FixtureRequest
) -> None:
    """The session's Ray head lends the variables to join it (its token) to each test that uses
    ``ray_head``, for that test alone: a test that runs after one does not see them."""
    token = ray_session_head.env["RAY_AUTH_TOKEN_PATH"]
    assert os.environ.get("RAY_AUTH_TOKEN_PATH") != token
    request.getfixturevalue("ray_head")
    assert os.environ["RAY_AUTH_TOKEN_PATH"] == token  # until this test ends (monkeypatch)
