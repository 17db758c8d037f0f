"""What a launcher tells a training process to do with its run dir (with its ``Topology``, the
rest of what ``entry.train_process`` is handed)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class RunDir:
    """Where a run writes, and what to do with what is already there."""

    path: Path
    resume: bool = False
    """Continue from the newest checkpoint, which must exist (``--resume``). A restarted job
    (``Topology.restart_count`` > 0) resumes when it finds one, without this."""
    overwrite: bool = False
    """Replace a run already there (``--overwrite``)."""
