"""Keep freed memory in the process instead of handing it back to the kernel at once.

glibc's malloc serves blocks above its mmap threshold (128 KiB at first) with fresh ``mmap`` calls
and unmaps them on free, and it returns the heap's free top past its trim threshold. A training
step allocates the same large activation and gradient buffers every minibatch, so each of them
page-faults again on first touch: on a CPU at 4096 envs that was 30,000 to 60,000 faults and a
third of a PPO update (``benchmarks/update_bench.py``). Raising both thresholds lets freed buffers
be reused as they are. The price: memory freed inside the heap stays with the process, so resident
memory follows the peak working set (fragmentation aside) rather than the current one.
PyTorch's CPU tuning guide gets the same from jemalloc or tcmalloc, which need a system package;
``mallopt`` needs nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 << 20
"""Blocks up to this size come from the heap: glibc's ceiling on 64-bit (its ``HEAP_MAX_SIZE / 2``)."""
TRIM_THRESHOLD = 256 << 20
"""Free memory at the heap's top beyond this goes back to the kernel."""
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")
"""Environment variables through which a user tunes glibc's malloc: when one is set, theirs win."""


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds for this process; False where nothing changed: the C
    library is not glibc, or the user set malloc's thresholds themselves."""
    return _set_thresholds(((_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD)))


def hand_back_freed_memory() -> bool:
    """Fix glibc's mmap threshold at its starting 128 KiB for this process: larger blocks are
    mapped when allocated and unmapped when freed. Left to itself glibc raises the threshold (up to
    32 MiB) as such blocks are freed, after which they come from the heap and stay resident when
    freed: a sharded learner's gather and scatter buffers then fragment it (GRPO on a 150M Llama,
    2 ranks: 4.1 GB peak per rank against 2.2 GB with the threshold fixed). False where nothing
    changed, as ``keep_freed_memory``."""
    return _set_thresholds(((_M_MMAP_THRESHOLD, 128 << 10),))


def _set_thresholds(thresholds: tuple[tuple[int, int], ...]) -> bool:
    if not sys.platform.startswith("linux") or any(name in os.environ for name in USER_SETTINGS):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    return all(mallopt(option, value) == 1 for option, value in thresholds)


def release_freed_memory() -> None:
    """Hand the heap's free pages back to the kernel now (``malloc_trim``): after a one-off large
    free, such as the whole weights a rank loaded before keeping only its shard of them, which
    would otherwise stay resident for the rest of the run."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).malloc_trim(0)
