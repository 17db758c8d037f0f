"""Run ``python ARGS...`` as a child process and record its peak resident set size.

Usage: python peak_rss.py OUT_DIR ARGS...   (ARGS as given to python: ``-m MODULE ...`` or
``SCRIPT.py ...``)

Writes ``OUT_DIR/rank-<RANK>.json`` (``rank-0.json`` without a launcher) with ``peak_rss_kib``:
the kernel's high-water mark of the child's resident memory, as ``wait4`` reports it when the
child ends (what GNU ``time -v`` prints as "Maximum resident set size"). Exact, not sampled, and
indifferent to how the child exits: distrl leaves through ``os._exit``, which skips any exit hook
in the process itself. Under torchrun this wrapper is the rank's process and the child does the
rank's work, so each rank is measured alone, without the launcher. Exits with the child's status;
standard library only, so it runs in any virtual environment.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path


def main() -> None:
    out_dir, *python_args = sys.argv[1:]
    child = os.posix_spawn(sys.executable, [sys.executable, *python_args], os.environ)
    # A launcher stopping its worker (torchrun sends SIGTERM) stops the work too.
    signal.signal(signal.SIGTERM, lambda signum, _frame: os.kill(child, signum))
    _, status, usage = os.wait4(child, 0)
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    rank = os.environ.get("RANK", "0")
    (Path(out_dir) / f"rank-{rank}.json").write_text(json.dumps({"peak_rss_kib": usage.ru_maxrss}))
    sys.exit(os.waitstatus_to_exitcode(status))


if __name__ == "__main__":
    main()
