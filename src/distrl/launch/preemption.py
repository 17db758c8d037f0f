"""Preemption signals: SIGTERM (schedulers, torchrun's agent) and SIGUSR1 (SLURM's
``--signal=USR1@90`` warning before the time limit).

The handler only raises a flag; the runner finishes its update, agrees with the other ranks
through a collective that the run is stopping (a signal that reached one rank stops them all),
writes a checkpoint and exits with ``PREEMPTED_EXIT_CODE``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time

PREEMPTED_EXIT_CODE = 75
"""EX_TEMPFAIL: the run stopped early on purpose, with its progress saved; run it again."""

_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


LAUNCHER_WATCH_S = 1.0
"""How often a rank under torchrun's agent checks that the agent is still its parent."""


class PreemptionFlag:
    """Set by SIGTERM/SIGUSR1 once installed, or, for a rank under torchrun's elastic agent, by
    the agent's death (killed, out of memory: it sends no signal then, and its ranks would train
    on as orphans beside the next launch); read by the training loop after every update."""

    def __init__(self) -> None:
        self.signal_name: str | None = None
        self._previous: dict[signal.Signals, object] = {}
        """The handlers ``install`` replaced, for ``restore``."""
        self._watching = threading.Event()

    @property
    def raised(self) -> bool:
        return self.signal_name is not None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # a Ray actor's task thread: Ray owns the process's signals
        for sig in _SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        if "TORCHELASTIC_RUN_ID" in os.environ:
            self._watching.set()
            threading.Thread(target=self._watch_launcher, args=(os.getppid(),), daemon=True).start()

    def restore(self) -> None:
        """Put back the handlers ``install`` replaced: a process that trains in-process (a test,
        a notebook) stops on SIGTERM again once training is over."""
        for sig, handler in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        self._previous.clear()
        self._watching.clear()

    def _watch_launcher(self, launcher: int) -> None:
        while self._watching.is_set():
            if os.getppid() != launcher:
                self.signal_name = "the death of its launcher (torchrun's agent)"
                return
            time.sleep(LAUNCHER_WATCH_S)

    def _handle(self, signum: int, frame: object) -> None:
        self.signal_name = signal.Signals(signum).name


def requeue_slurm_job() -> str | None:
    """Ask SLURM to requeue this job (it resumes from the checkpoint when it starts again).

    Returns a line describing what happened, or None outside SLURM.
    """
    job_id = os.environ.get("SLURM_JOB_ID")
    if job_id is None:
        return None
    if shutil.which("scontrol") is None:
        return f"SLURM job {job_id}: scontrol not found, not requeued"
    result = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        return f"SLURM job {job_id}: scontrol requeue failed: {result.stderr.strip()}"
    return f"SLURM job {job_id} requeued"
