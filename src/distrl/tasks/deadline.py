"""A time limit on one call of a user's function (a reward function that never returns: a loop
that does not end, a checker waiting on nothing).

On the main thread (a learner scoring its own completions) the limit is ``SIGALRM``: it cuts off
Python code and blocking calls alike. Elsewhere (a Ray verifier actor's calls run on a thread of
their own) a watchdog raises the same exception in the calling thread, which stops Python code
at its next instruction; a call blocked inside C is left to the worker's call timeout
(``workers.call_timeout_s``), which kills the worker."""

from __future__ import annotations

import contextlib
import ctypes
import math
import signal
import threading
import time
from collections.abc import Iterator


class DeadlinePassed(BaseException):
    """Raised in the call that ran past its limit (a BaseException: a user's ``except Exception``
    cannot swallow it)."""


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise ``DeadlinePassed`` in the code under it once it has run ``seconds``; None: no limit."""
    if seconds is None:
        yield
    elif threading.current_thread() is threading.main_thread():
        with _alarm(seconds):
            yield
    else:
        with _watchdog(seconds):
            yield


@contextlib.contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    def passed(signum: int, frame: object) -> None:
        raise DeadlinePassed

    previous = signal.signal(signal.SIGALRM, passed)
    outer, _ = signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
        if outer:  # a caller's own alarm (a test's time limit) goes on with what it had left
            signal.setitimer(signal.ITIMER_REAL, max(outer - (time.monotonic() - start), 1e-3))


class _Watchdog:
    """One thread per process timing every other thread's calls (a thread per call would cost
    more than a short reward function). A thread's calls are timed one at a time (not nested)."""

    def __init__(self) -> None:
        self.due: dict[int, float] = {}
        """A watched thread -> when its call runs out (monotonic)."""
        # A plain lock, taken by a ``with`` (in C): a DeadlinePassed pending in the caller is then
        # raised inside the block, which releases the lock. Condition.__enter__ is Python code,
        # where the exception could land between taking the lock and the block that releases it.
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.thread: threading.Thread | None = None

    @contextlib.contextmanager
    def watch(self, seconds: float) -> Iterator[None]:
        caller = threading.get_ident()
        with self.lock:
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="distrl-deadline", daemon=True)
                self.thread.start()
            self.due[caller] = time.monotonic() + seconds
            self.changed.notify()
        try:
            yield
        finally:
            # A call that ran out just as it ended is still cut off: the exception, already sent,
            # is raised here at the latest (the watchdog sends none once the call is off its list).
            with self.lock:
                del self.due[caller]

    def _run(self) -> None:
        with self.changed:
            while True:
                now = time.monotonic()
                for caller in [caller for caller, due in self.due.items() if due <= now]:
                    self.due[caller] = math.inf  # sent once
                    ctypes.pythonapi.PyThreadState_SetAsyncExc(
                        ctypes.c_ulong(caller), ctypes.py_object(DeadlinePassed)
                    )
                self.changed.wait(min([*self.due.values(), now + 3600.0]) - now)


_watchdog = _Watchdog().watch
