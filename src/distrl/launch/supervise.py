"""Run one node's worker processes to the end, for distrl's own launchers (the file-rendezvous node
launcher and ``python -m distrl.launch.jax``).

SIGINT and SIGTERM sent to the launcher are forwarded to every worker. A worker that fails stops
its siblings (SIGTERM, then SIGKILL after a grace period), since they would otherwise wait in a
collective for a peer that is gone; its exit code becomes the launcher's. Workers stay in the
launcher's process group, so that killing the group (``kill -- -PGID``, a test's cleanup) leaves no
orphans; a signal sent to the whole group (Ctrl-C in a terminal) therefore reaches a worker twice,
directly and forwarded. distrl's SIGTERM handler only raises a flag, so the repeat is harmless.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any

from distrl.launch.preemption import PREEMPTED_EXIT_CODE

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
STOP_GRACE_S = 5.0
"""Seconds a worker has to exit after SIGTERM before it is killed, when a sibling failed."""
_POLL_INTERVAL_S = 0.1


def exit_status(returncode: int) -> int:
    """A worker's return code as a shell reports it: killed by signal S (``-S``) is ``128 + S``."""
    return 128 - returncode if returncode < 0 else returncode


def run_workers(
    argv: Sequence[str], envs: Sequence[Mapping[str, str]], prog: str, stop_grace_s: float = STOP_GRACE_S
) -> int:
    """Start one ``argv`` process per entry of ``envs`` and wait for all of them.

    Returns 0 when every worker exits 0, else the first non-zero exit status (see ``exit_status``).
    After a forwarded signal, or when a worker exits with ``PREEMPTED_EXIT_CODE`` (the ranks agreed
    to stop and the others are still saving), the others are waited for rather than stopped.
    ``prog`` names the launcher in the line it prints when it stops the workers.
    """
    pending_signals: list[int] = []
    previous_handlers: dict[signal.Signals, Any] = {}
    for signum in FORWARDED_SIGNALS:
        # A launcher started with the signal ignored (nohup, a background job) leaves it ignored.
        if signal.getsignal(signum) is not signal.SIG_IGN:
            previous_handlers[signum] = signal.signal(signum, lambda s, _: pending_signals.append(s))
    workers: list[subprocess.Popen] = []
    try:
        for env in envs:
            workers.append(subprocess.Popen(list(argv), env=dict(env)))
        return _supervise(workers, pending_signals, prog, stop_grace_s)
    except BaseException:
        _stop(workers, stop_grace_s)
        raise
    finally:
        for signum, handler in previous_handlers.items():
            signal.signal(signum, handler)


def _supervise(
    workers: list[subprocess.Popen], pending_signals: list[int], prog: str, stop_grace_s: float
) -> int:
    stopping = False
    status = 0
    while True:
        # Forward here rather than in the handler: the handler may interrupt a poll() of the same worker.
        while pending_signals:
            stopping = True
            signum = pending_signals.pop(0)
            for worker in workers:
                if worker.poll() is None:
                    worker.send_signal(signum)
        codes = [worker.poll() for worker in workers]
        if status == 0:
            failed = next((i for i, code in enumerate(codes) if code not in (None, 0)), None)
            if failed is not None:
                status = exit_status(codes[failed])
                if not stopping and codes[failed] != PREEMPTED_EXIT_CODE:
                    # Said only when there are others to stop: a lone worker's own line (a user
                    # error's, exit 2) stays the only one.
                    if any(code is None for code in codes):
                        reason = _describe(codes[failed])
                        print(f"{prog}: local rank {failed} {reason}; stopping the others", file=sys.stderr)
                    _stop(workers, stop_grace_s)
                    return status
        if all(code is not None for code in codes):
            return status
        time.sleep(_POLL_INTERVAL_S)


def _stop(workers: list[subprocess.Popen], grace_s: float) -> None:
    """SIGTERM every running worker, SIGKILL those still running after ``grace_s``; reap them all."""
    running = [worker for worker in workers if worker.poll() is None]
    for worker in running:
        worker.terminate()
    deadline = time.monotonic() + grace_s
    for worker in running:
        try:
            worker.wait(timeout=max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


def _describe(returncode: int) -> str:
    if returncode >= 0:
        return f"exited with code {returncode}"
    try:
        return f"was killed by {signal.Signals(-returncode).name}"
    except ValueError:  # a signal without a name (real-time signals)
        return f"was killed by signal {-returncode}"
