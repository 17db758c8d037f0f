"""A process's resource usage: its CPU share since the last reading, resident memory and GPU
memory, now and at their peaks so far (what the metrics' ``usage/*`` and Ray mode's worker
reports show)."""

from __future__ import annotations

import resource
import time

import psutil
import torch


class ProcessUsage:
    """Readings of this process; the first covers the time since the process started."""

    def __init__(self) -> None:
        self.process = psutil.Process()
        self._last = (0.0, self.process.create_time())
        """(CPU seconds, wall time) at the last reading."""

    def read(self) -> dict[str, float]:
        cpu_s, now = sum(self.process.cpu_times()[:2]), time.time()
        last_cpu_s, last_time = self._last
        self._last = (cpu_s, now)
        cuda = torch.cuda.is_initialized()
        return {
            "cpu_percent": 100.0 * (cpu_s - last_cpu_s) / max(now - last_time, 1e-6),
            "rss_mb": self.process.memory_info().rss / 2**20,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10,  # Linux: KiB
            "gpu_mb": (torch.cuda.memory_allocated() if cuda else 0) / 2**20,
            "peak_gpu_mb": (torch.cuda.max_memory_allocated() if cuda else 0) / 2**20,
        }
