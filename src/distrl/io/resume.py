"""The checkpoint a run resumes from, on every rank, without one rank sending it to the others.

Rank 0 chooses it (the newest that passes its checksums and fits the config: ``run_dir``) and
tells the others its path and its manifest's digest. Each rank that sees the same manifest there
(a shared file system, as sharded checkpoints need anyway) reads and verifies the files itself;
a rank that does not (a node with a run dir of its own) is sent the files one at a time, with a
line saying so. A sharded checkpoint's shards are read by each rank from the path, so a rank
that cannot see them stops the run with one line.
"""

from __future__ import annotations

import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from distrl.errors import UserError
from distrl.io import checkpoint as ckpt


class Collectives(Protocol):
    """What resuming asks of the ranks' communicator (``comm.Comm`` is one; the communicators sit
    a layer above the checkpoints they read)."""

    rank: int

    @property
    def is_main(self) -> bool: ...
    def sum_scalars(self, values: Sequence[float]) -> list[float]: ...
    def broadcast_bytes(self, payload: bytes | None, src: int = 0) -> bytes: ...


ChosenCheckpoint = tuple[Path, ckpt.CheckpointFiles]


def announcement(chosen: ChosenCheckpoint | None) -> bytes:
    """What rank 0 tells every rank of its choice (empty: a fresh start)."""
    if chosen is None:
        return b""
    path = chosen[0]
    return json.dumps({"path": str(path), "manifest": _manifest_digest(path)}).encode()


def checkpoint_on_every_rank(
    comm: Collectives, announced: bytes, chosen: ChosenCheckpoint | None
) -> ckpt.CheckpointFiles | None:
    """The files of the checkpoint rank 0 ``announced`` (``chosen``: rank 0's own, already
    read), on every rank; None for a fresh start. A collective."""
    if not announced:
        return None
    choice = json.loads(announced)
    path = Path(choice["path"])
    failure: UserError | None = None
    if comm.is_main:
        assert chosen is not None, "rank 0 announces the checkpoint it chose"
        files: ckpt.CheckpointFiles | None = chosen[1]
    else:
        seen = _manifest_digest(path) == choice["manifest"]  # rank 0 verified the shards' files
        try:
            files = ckpt.load_checkpoint(path, verify_shards=False) if seen else None
        except UserError as exc:  # said on every rank, not left to a collective's timeout
            files, failure = None, exc
    counts = comm.sum_scalars([failure is not None, files is None and failure is None])
    failed, unseen = (int(n) for n in counts)
    if failed:
        if failure is not None:
            raise failure
        raise UserError(
            f"checkpoint {path}: {failed} rank(s) could not read it (their lines say why)",
            code="checkpoint-unreadable-on-other-rank",
        )
    if not unseen:
        return files
    # Rank 0 has every file; each is sent on its own.
    names = json.loads(comm.broadcast_bytes(json.dumps(sorted(files)).encode() if comm.is_main else None))
    sharded = bool(json.loads(files["state.json"]).get("sharded")) if files is not None else False
    if comm.sum_scalars([sharded])[0]:  # rank 0 knows; its count reaches every rank
        raise UserError(
            f"checkpoint {path} is not visible on {unseen} rank(s): a sharded checkpoint is read by "
            "every rank from the run dir, which must be on a file system all nodes share",
            code="checkpoint-read-not-shared",
        )
    if files is not None:
        for name in names:  # for the ranks that do not see it
            comm.broadcast_bytes(files[name] if comm.is_main else None)
        return files
    print(f"distrl: rank {comm.rank} does not see checkpoint {path}: rank 0 sends it", file=sys.stderr)
    return {name: comm.broadcast_bytes(None) for name in names}


def _manifest_digest(path: Path) -> str | None:
    try:
        return hashlib.sha256((path / ckpt.MANIFEST).read_bytes()).hexdigest()
    except OSError:
        return None
