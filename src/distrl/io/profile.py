"""torch.profiler over a few updates of a process, written as a Chrome trace (``--profile N``)."""

from __future__ import annotations

from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile, schedule


class UpdateProfiler:
    """Profiles the process from the end of its first step (warm-up: imports, allocation) over
    the next ``steps`` steps, then writes ``path`` (chrome://tracing, Perfetto). ``steps`` 0:
    off, at no cost."""

    def __init__(self, steps: int, path: Path) -> None:
        self.path = path
        self.profiler: profile | None = None
        if steps:
            activities = [ProfilerActivity.CPU]
            if torch.cuda.is_available():
                activities.append(ProfilerActivity.CUDA)
            self.profiler = profile(
                activities=activities,
                schedule=schedule(wait=1, warmup=0, active=steps, repeat=1),
                on_trace_ready=self._write,
            )
            self.profiler.start()

    def step(self) -> None:
        """One step (an update, a worker's call) ended."""
        if self.profiler is not None:
            self.profiler.step()

    def close(self) -> None:
        if self.profiler is not None:
            self.profiler.stop()
            self.profiler = None

    def _write(self, finished: profile) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        finished.export_chrome_trace(str(self.path))
