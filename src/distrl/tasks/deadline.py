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
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class _Watchdog:
    """One thread per process timing every other thread's calls (a thread per call would cost
    more than a short reward function)."""

    def __init__(self) -> None:
        self.due: dict[int, float] = {}
        """A watched thread -> when its call runs out (monotonic)."""
        self.changed = threading.Condition()
        self.thread: threading.Thread | None = None

    @contextlib.contextmanager
    def watch(self, seconds: float) -> Iterator[None]:
        caller = threading.get_ident()
        with self.changed:
            if self.thread is None:
                self.thread = threading.Thread(target=self._run, name="distrl-deadline", daemon=True)
                self.thread.start()
            self.due[caller] = time.monotonic() + seconds
            self.changed.notify()
        try:
            yield
        finally:
            with self.changed:
                if self.due.pop(caller, None) is None:  # it ran out just as it ended: nothing raised later
                    _raise_in(caller, None)

    def _run(self) -> None:
        with self.changed:
            while True:
                now = time.monotonic()
                for caller in [caller for caller, due in self.due.items() if due <= now]:
                    del self.due[caller]
                    _raise_in(caller, DeadlinePassed)
                self.changed.wait(min(self.due.values(), default=now + 3600.0) - now)


def _raise_in(thread: int, exception: type[BaseException] | None) -> None:
    """Raise ``exception`` in ``thread`` at its next instruction (None: take back one not yet raised)."""
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread), ctypes.py_object(exception) if exception else ctypes.py_object()
    )


_watchdog = _Watchdog().watch
