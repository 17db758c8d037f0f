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


@contextlib.contextmanager
def _watchdog(seconds: float) -> Iterator[None]:
    caller = threading.get_ident()
    lock = threading.Lock()
    running = [True]

    def passed() -> None:
        with lock:  # never raised once the call is over
            if running[0]:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(caller), ctypes.py_object(DeadlinePassed)
                )

    timer = threading.Timer(seconds, passed)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        with lock:
            running[0] = False
        timer.cancel()
