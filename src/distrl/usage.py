"""A process's resource usage: its CPU share since the last reading, resident memory and GPU
memory, now and at their peaks since the last reading (what the metrics' ``usage/*`` and Ray
mode's worker reports show)."""

from __future__ import annotations

import resource
import time
from pathlib import Path

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
            "peak_rss_mb": _peak_rss_since_last_reading() / 2**20,
            "gpu_mb": (torch.cuda.memory_allocated() if cuda else 0) / 2**20,
            "peak_gpu_mb": _peak_gpu_since_last_reading(cuda) / 2**20,
        }


def _peak_rss_since_last_reading() -> float:
    """The peak resident set (bytes) since the last call: Linux's high-water mark, reset after
    reading (``/proc/self/clear_refs``); elsewhere the process's lifetime peak."""
    try:
        status = Path("/proc/self/status").read_text()
        peak_kib = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
        Path("/proc/self/clear_refs").write_text("5")
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0
    return peak_kib * 1024.0


def _peak_gpu_since_last_reading(cuda: bool) -> float:
    if not cuda:
        return 0.0
    peak = torch.cuda.max_memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    return float(peak)
