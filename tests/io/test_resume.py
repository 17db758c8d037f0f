"""The checkpoint a run resumes from reaches every rank of a real gloo group: read by each rank
where it sees it, sent file by file where it does not, and a sharded one refused in one line
where a rank cannot read its shards."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pytest

from distrl.comm import TorchComm
from distrl.errors import UserError
from distrl.io import checkpoint as ckpt
from distrl.io.resume import announcement, checkpoint_on_every_rank
from tests.distributed import run_ranks

FILES = {"state.json": json.dumps({"step": 7}).encode(), "model.safetensors": bytes(range(256)) * 256}


def _written(root: Path, files: dict[str, bytes]) -> Path:
    ckpt.save_checkpoint(root / "checkpoints", 7, files, keep_last=1)
    return ckpt.list_checkpoints(root / "checkpoints")[-1]


def _at_home(comm: TorchComm, out: Path) -> Path:
    """Each rank works in a folder of its own: the relative path rank 0 announces names each
    rank's own copy, as on nodes with disks of their own."""
    home = out / f"rank{comm.rank}"
    home.mkdir()
    os.chdir(home)
    return home


def _resumed(comm: TorchComm, files: dict[str, bytes]) -> dict[str, bytes] | None:
    """What every rank resumes from once rank 0 announces its checkpoint (of ``files``)."""
    chosen = (Path("checkpoints") / ckpt.checkpoint_dir_name(7), files) if comm.is_main else None
    announced = comm.broadcast_bytes(announcement(chosen) if comm.is_main else None)
    return checkpoint_on_every_rank(comm, announced, chosen)


def _resuming_rank(comm: TorchComm, out: Path, sees: list[bool]) -> None:
    """The checkpoint is written in rank 0's folder and in those of the ranks that ``sees`` it."""
    home = _at_home(comm, out)
    if sees[comm.rank]:
        _written(home, FILES)
    said = io.StringIO()
    with contextlib.redirect_stderr(said):
        files = _resumed(comm, FILES)
    (out / f"files{comm.rank}.json").write_text(json.dumps({k: v.hex() for k, v in files.items()}))
    (out / f"said{comm.rank}").write_text(said.getvalue())


@pytest.mark.parametrize("sees", [[True, True], [True, False]], ids=["shared", "rank-1-apart"])
def test_every_rank_gets_the_checkpoint_rank_0_chose(tmp_path: Path, sees: list[bool]) -> None:
    run_ranks(_resuming_rank, 2, tmp_path, sees)
    for rank in range(2):
        files = json.loads((tmp_path / f"files{rank}.json").read_text())
        assert {k: bytes.fromhex(v) for k, v in files.items()} == FILES
    sent = "distrl: rank 1 does not see checkpoint checkpoints/step_000000000007: rank 0 sends it\n"
    assert (tmp_path / "said1").read_text() == ("" if sees[1] else sent)
    assert (tmp_path / "said0").read_text() == ""


def _sharded_rank(comm: TorchComm, out: Path) -> None:
    home = _at_home(comm, out)
    files = {**FILES, "state.json": json.dumps({"sharded": True}).encode()}
    if comm.is_main:
        _written(home, files)
    with pytest.raises(UserError) as said:
        _resumed(comm, files)
    (out / f"said{comm.rank}").write_text(str(said.value))


def test_a_sharded_checkpoint_a_rank_cannot_see_is_one_line_on_every_rank(tmp_path: Path) -> None:
    run_ranks(_sharded_rank, 2, tmp_path)
    for rank in range(2):
        said = (tmp_path / f"said{rank}").read_text()
        assert "is not visible on 1 rank(s): a sharded checkpoint is read by every rank" in said


def _corrupt_copy_rank(comm: TorchComm, out: Path) -> None:
    """Rank 1's copy of the checkpoint has rank 0's manifest but a damaged model file."""
    written = _written(_at_home(comm, out), FILES)
    if comm.rank == 1:
        (written / "model.safetensors").write_bytes(b"damaged")
    with pytest.raises(UserError) as said:
        _resumed(comm, FILES)
    (out / f"said{comm.rank}").write_text(str(said.value))


def test_a_rank_that_cannot_read_its_copy_stops_every_rank_in_one_line(tmp_path: Path) -> None:
    run_ranks(_corrupt_copy_rank, 2, tmp_path, timeout_s=60)
    assert "model.safetensors does not match its checksum" in (tmp_path / "said1").read_text()
    assert "1 rank(s) could not read it" in (tmp_path / "said0").read_text()
