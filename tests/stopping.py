"""How a test session stops: on SIGTERM or Ctrl-C within seconds, with no process left behind.

``SessionStop`` (installed by conftest.py) makes pytest a child subreaper, so that every process
the session starts stays its descendant, whatever it does to escape (``setsid``, a new session, a
double fork, a parent killed first); turns SIGTERM into pytest's own interruption (fixtures torn
down, a summary, a non-zero exit); notices a SIGTERM that a test's own handler took (an in-process
training loop's preemption handler saves a checkpoint and raises ``Preempted``) and stops the
session after that test; and at the end stops every descendant still running.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import time
from collections.abc import Iterable, Iterator
from types import FrameType
from typing import Any

import psutil
import pytest

GUARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGALRM)
"""The signals whose handlers a test must leave as it found them."""
_PR_SET_CHILD_SUBREAPER = 36
"""From <linux/prctl.h>."""


def become_subreaper() -> bool:
    """Make this process the one its orphaned descendants are re-parented to (Linux); whether it
    is."""
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def running(process: psutil.Process) -> bool:
    """Alive and not a zombie (a zombie has ended; only its exit status waits to be read)."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def tree(pid: int) -> list[psutil.Process]:
    """``pid`` and every process descended from it, parents first; [] if it has ended."""
    try:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]
    except psutil.Error:
        return []


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid`` and every process descended from it, all read before the first dies (a
    process whose parent dies is re-parented, out of the tree)."""
    for process in tree(pid):
        with contextlib.suppress(psutil.Error):
            process.kill()  # psutil checks that the pid is still that process


def stop(processes: Iterable[psutil.Process], grace_s: float) -> list[psutil.Process]:
    """SIGTERM ``processes``, SIGKILL those still running after ``grace_s``; those still running
    5 s after that (none, unless one is stuck in the kernel)."""
    processes = [p for p in processes if running(p)]
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
        for process in processes:
            with contextlib.suppress(psutil.Error):
                process.send_signal(sig)  # psutil checks that the pid is still that process
        deadline = time.monotonic() + wait_s
        while (processes := [p for p in processes if running(p)]) and time.monotonic() < deadline:
            time.sleep(0.05)
    return processes


@contextlib.contextmanager
def handlers_kept(signals: Iterable[signal.Signals] = GUARDED_SIGNALS) -> Iterator[None]:
    """Fail if the body leaves a signal handler of ``signals`` other than it found (after putting
    the one it found back): a handler a test installs is its own to restore, in a ``finally``."""
    before = {sig: signal.getsignal(sig) for sig in signals}
    yield
    after = {sig: signal.getsignal(sig) for sig in signals}
    # ``!=``, not ``is not``: a bound method is a new object each time it is read.
    left = {
        sig: after[sig]
        for sig in before
        if after[sig] != before[sig] and not _test_timer_taken_down(before[sig], after[sig])
    }
    for sig in left:
        if before[sig] is not None:  # None: installed outside Python, nothing to put back
            signal.signal(sig, before[sig])
    if left:
        installed = ", ".join(f"{sig.name}: {handler!r}" for sig, handler in left.items())
        pytest.fail(f"left signal handlers installed ({installed})")


def _test_timer_taken_down(before: object, after: object) -> bool:
    """Whether ``before`` is pytest-timeout's SIGALRM handler for the test and ``after`` what it
    leaves when it takes it down itself (early, when the test fails)."""
    return getattr(before, "__module__", None) == "pytest_timeout" and after == signal.SIG_DFL


class SessionStop:
    """SIGTERM as an interrupt, and every descendant stopped at the end (``install``,
    ``close``)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.closing = False
        self._previous: Any = signal.SIG_DFL
        """The SIGTERM handler before ``install``'s."""
        self._wakeup: tuple[int, int] | None = None
        self._previous_wakeup = -1

    def install(self) -> None:
        """Once a session, with ``close`` already registered to run: it undoes whatever of this
        ran."""
        become_subreaper()
        read, write = os.pipe()
        self._wakeup = (read, write)
        os.set_blocking(read, False)
        os.set_blocking(write, False)
        # Python's C-level handler writes each signal's number here, whichever Python handler
        # then runs: how a SIGTERM that a test's own handler took is noticed.
        self._previous_wakeup = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        previous = signal.signal(signal.SIGTERM, self._on_sigterm)
        self._previous = signal.SIG_DFL if previous is None else previous  # None: set outside Python
        os.register_at_fork(after_in_child=self._forget)

    def terminated(self) -> bool:
        """Whether a SIGTERM came since the last call."""
        if self._wakeup is None:
            return False
        received = b""
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self._wakeup[0], 4096):
                received += chunk
        return signal.SIGTERM in received

    def close(self, grace_s: float = 3.0) -> None:
        """Stop every descendant still running, then put back the signal handling ``install``
        replaced."""
        if self._wakeup is None or os.getpid() != self.pid:
            return
        self.closing = True  # a second SIGTERM must not cut this short
        try:
            stop(psutil.Process().children(recursive=True), grace_s)
            stop(psutil.Process().children(recursive=True), 0)  # any started while the first stopped
        finally:
            if signal.getsignal(signal.SIGTERM) == self._on_sigterm:
                signal.signal(signal.SIGTERM, self._previous)
            signal.set_wakeup_fd(self._previous_wakeup)
            for fd in self._wakeup:
                os.close(fd)
            self._wakeup = None

    def _on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        if not self.closing:
            raise KeyboardInterrupt("SIGTERM")

    def _forget(self) -> None:
        """In a child forked from the session: the signal handling it would have had without it."""
        if self._wakeup is not None and os.getpid() != self.pid:
            with contextlib.suppress(ValueError):
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGTERM, self._previous)
