"""Checkpoints as directories of safetensors + JSON files, never pickle.

A checkpoint is held in memory as ``{file name: bytes}``; on disk it is a directory
``checkpoints/step_<global step>/`` with those files plus ``manifest.json`` (sha256 of each
file), and for a sharded learner folders of shards that each rank writes and reads itself
(``io.shards``), never held in memory whole. It is written to a temporary directory and renamed
into place, so a reader never sees a half-written checkpoint. Every rank reads the one it
resumes from itself (``io.resume``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from distrl.errors import UserError
from distrl.io import shards as sharded_files

CheckpointFiles = dict[str, bytes]
MANIFEST = "manifest.json"
BEST = "best.json"
"""Beside the checkpoints: which one holds the weights that scored best at the run's own checks
(``checkpoint.keep_best``), and the score; that one is kept whatever ``keep_last`` says."""
_PREFIX = "step_"


def tensors_to_bytes(tensors: dict[str, torch.Tensor]) -> bytes:
    """Tensors sharing memory (tied weights: a pretrained language model's output layer and its
    embedding) are written as a copy each, which safetensors needs; loading them back into the
    model ties them again, both holding the same values."""
    written: dict[str, torch.Tensor] = {}
    storages: set[int] = set()
    for name, given in tensors.items():
        tensor = given.detach().cpu().contiguous()
        storage = tensor.untyped_storage().data_ptr()
        written[name] = tensor.clone() if storage in storages else tensor
        storages.add(storage)
    return save_tensors(written)


def tensors_from_bytes(data: bytes) -> dict[str, torch.Tensor]:
    return load_tensors(data)


def json_to_bytes(obj: Any) -> bytes:
    return json.dumps(obj, indent=1, sort_keys=True).encode()


def strip_prefix(tensors: dict[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The tensors whose names start with ``prefix``, with the prefix removed."""
    return {k[len(prefix) :]: v for k, v in tensors.items() if k.startswith(prefix)}


def checkpoint_dir_name(global_step: int) -> str:
    return f"{_PREFIX}{global_step:012d}"


def shards_dir(root: Path, global_step: int) -> Path:
    """Where every rank of a sharded learner writes its shards of a checkpoint (``io.shards``)
    before rank 0 completes it (``save_checkpoint``): the same path on every rank."""
    return root / f".{checkpoint_dir_name(global_step)}.tmp-shards"


def save_checkpoint(
    root: Path,
    global_step: int,
    files: CheckpointFiles,
    keep_last: int,
    shards: Path | None = None,
    best: dict[str, Any] | None = None,
) -> Path:
    """Atomically write ``files`` as ``root/step_<global_step>`` and prune old checkpoints;
    ``shards``: the ``shards_dir`` the ranks wrote their folders of shards in, which becomes the
    checkpoint (the manifest lists their files too); ``best``: its weights' score, the best so far
    (recorded in ``root/best.json`` once the checkpoint is complete)."""
    final = root / checkpoint_dir_name(global_step)
    tmp = shards or root / f".{final.name}.tmp-{os.getpid()}"
    if shards is None:
        shutil.rmtree(tmp, ignore_errors=True)
    manifest = {name: hashlib.sha256(data).hexdigest() for name, data in files.items()}
    try:
        root.mkdir(parents=True, exist_ok=True)
        tmp.mkdir(exist_ok=shards is not None)
        if shards is not None:
            _check_whole(tmp, final, json.loads(files["state.json"])["shapes"])
        manifest.update(_file_digests(tmp))
        for name, data in {**files, MANIFEST: json_to_bytes(manifest)}.items():
            _write_synced(tmp / name, data)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        if best is not None:
            _write_atomically(root / BEST, json_to_bytes({"checkpoint": final.name, **best}))
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UserError(
            f"writing checkpoint {final} failed: {exc.strerror or exc}; earlier checkpoints are intact",
            code="checkpoint-write-failed",
        ) from None
    # Only now that the new checkpoint is complete may old ones go.
    _prune(root, keep_last)
    return final


def _check_whole(directory: Path, final: Path, whole: dict[str, dict[str, list[int]]]) -> None:
    """Refuse to complete a checkpoint whose shards do not add up to the tensors ``whole`` names
    by folder (a rank wrote its file where this rank cannot see it: a node without the shared
    file system)."""
    for folder, shapes in whole.items():
        missing = sharded_files.missing_part(directory / folder, shapes)
        if missing is not None:
            shutil.rmtree(directory, ignore_errors=True)
            raise UserError(
                f"writing checkpoint {final} failed: in {folder}/, {missing} (a rank's shards are "
                "not in this directory: every rank needs the run dir on a shared file system); earlier "
                "checkpoints are intact",
                code="checkpoint-write-not-shared",
            )


def _file_digests(directory: Path) -> dict[str, str]:
    """sha256 of every file in ``directory``'s folders (a sharded learner's shards), by path
    relative to it, read a block at a time: no file is held whole."""
    digests = {}
    for file in sorted(p for p in directory.rglob("*") if p.is_file() and p.parent != directory):
        with open(file, "rb") as fh:
            digests[file.relative_to(directory).as_posix()] = hashlib.file_digest(fh, "sha256").hexdigest()
    return digests


class BackgroundWriter:
    """Writes checkpoints on one background thread: rank 0 hands over bytes and keeps training,
    so the other ranks never wait at the next collective for rank 0's disk."""

    def __init__(self, root: Path, keep_last: int) -> None:
        self.root = root
        self.keep_last = keep_last
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="checkpoint-writer")
        self._pending: Future[Path] | None = None

    def submit(
        self,
        global_step: int,
        files: CheckpointFiles,
        shards: Path | None = None,
        best: dict[str, Any] | None = None,
    ) -> None:
        """``save_checkpoint`` of ``files`` (and the ``shards`` the ranks wrote, and its ``best``
        score) in the background."""
        self.wait()  # one write in flight at a time, and its errors surface here
        self._pending = self._pool.submit(
            save_checkpoint, self.root, global_step, files, self.keep_last, shards, best
        )

    def wait(self) -> Path | None:
        """Block until the pending write is on disk; return its directory."""
        pending, self._pending = self._pending, None
        return pending.result() if pending is not None else None

    def close(self) -> None:
        try:
            self.wait()
        finally:
            self._pool.shutdown()


def list_checkpoints(root: Path) -> list[Path]:
    """Checkpoint directories under ``root``, oldest first."""
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith(_PREFIX))


def best_checkpoint(root: Path) -> dict[str, Any] | None:
    """``root/best.json``: the checkpoint that scored best at the run's own checks (its name under
    ``checkpoint``), the metric and its value; None when the run kept none."""
    try:
        return json.loads((root / BEST).read_text())
    except (OSError, ValueError):
        return None


def resolve_checkpoint(path: Path, best: bool = False) -> Path:
    """Accept a checkpoint dir, a run dir or a run's ``checkpoints/`` dir; return the newest, or
    with ``best`` the one whose weights scored best at the run's own checks."""
    if (path / MANIFEST).is_file():
        if best:
            raise UserError(
                f"--best picks a checkpoint of a run: give the run dir, not checkpoint {path}",
                code="checkpoint-best-needs-run-dir",
            )
        return path
    for root in (path / "checkpoints", path):
        if best:
            record = best_checkpoint(root)
            if record is not None and (root / record["checkpoint"] / MANIFEST).is_file():
                return root / record["checkpoint"]
            continue
        found = list_checkpoints(root)
        if found:
            return found[-1]
    if best:
        raise UserError(
            f"no best checkpoint at {path}: the run kept none (checkpoint.keep_best is off, or no check "
            "of its own scored its weights: train.stop_return unset, or GRPO's held-out prompts scored "
            "by eval workers); its newest is evaluated without --best",
            code="checkpoint-no-best",
        )
    raise UserError(
        f"no checkpoint found at {path} (expected a run dir or a checkpoint dir)", code="checkpoint-not-found"
    )


def load_checkpoint(path: Path, verify_shards: bool = True) -> CheckpointFiles:
    """Read a checkpoint directory and verify every file against its manifest (``verify_shards``
    False: the shards' files only exist; another rank verified them)."""
    manifest_path = path / MANIFEST
    if not manifest_path.is_file():
        raise UserError(f"checkpoint {path}: {MANIFEST} is missing", code="checkpoint-manifest-missing")
    try:
        manifest = json.loads(manifest_path.read_text())
    except ValueError:
        raise UserError(
            f"checkpoint {path}: {MANIFEST} is not valid JSON (corrupted)", code="checkpoint-manifest-corrupt"
        ) from None
    files: CheckpointFiles = {}
    for name, digest in manifest.items():
        file = path / name
        if not file.is_file():
            raise UserError(
                f"checkpoint {path}: file {name} listed in the manifest is missing",
                code="checkpoint-file-missing",
            )
        if "/" in name:  # a rank's shards: checked here, read by each rank where it resumes
            if not verify_shards:
                continue
            with open(file, "rb") as fh:
                data, found = b"", hashlib.file_digest(fh, "sha256").hexdigest()
        else:
            data = file.read_bytes()
            found = hashlib.sha256(data).hexdigest()
            files[name] = data
        if found != digest:
            raise UserError(
                f"checkpoint {path}: {name} does not match its checksum (corrupted)",
                code="checkpoint-checksum-mismatch",
            )
    return files


def _prune(root: Path, keep_last: int) -> None:
    """All but the newest ``keep_last`` checkpoints go, except the best one (``BEST``)."""
    record = best_checkpoint(root)
    best = record["checkpoint"] if record is not None else None
    for old in list_checkpoints(root)[:-keep_last]:
        if old.name != best:
            shutil.rmtree(old, ignore_errors=True)


def _write_synced(path: Path, data: bytes) -> None:
    """``data`` as ``path``, on disk before this returns."""
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def _write_atomically(path: Path, data: bytes) -> None:
    """``data`` as ``path``, which a reader sees whole or as it was."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    _write_synced(tmp, data)
    os.replace(tmp, path)
