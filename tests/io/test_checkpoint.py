"""The best checkpoint (``checkpoint.keep_best``): named in ``checkpoints/best.json`` once it is
complete, kept whatever ``keep_last`` says until a better one replaces it, and found by
``resolve_checkpoint(best=True)``; asking for one a run did not keep is one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distrl.errors import UserError
from distrl.io import checkpoint as ckpt


def _save(root: Path, step: int, best: float | None = None) -> None:
    record = None if best is None else {"metric": "stop_check_return", "value": best, "global_step": step}
    ckpt.save_checkpoint(root, step, {"state.json": json.dumps({"step": step}).encode()}, 2, best=record)


def _kept(root: Path) -> list[str]:
    return [path.name for path in ckpt.list_checkpoints(root)]


def test_the_best_checkpoint_outlives_keep_last_until_a_better_one_comes(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    _save(root, 1, best=10.0)
    for step in (2, 3, 4):
        _save(root, step)
    names = [ckpt.checkpoint_dir_name(step) for step in range(6)]
    assert _kept(root) == [names[1], names[3], names[4]]  # keep_last=2, and the best
    assert ckpt.best_checkpoint(root) == {
        "checkpoint": names[1], "metric": "stop_check_return", "value": 10.0, "global_step": 1
    }  # fmt: skip
    assert ckpt.resolve_checkpoint(tmp_path, best=True) == root / names[1]
    assert ckpt.resolve_checkpoint(tmp_path) == root / names[4]
    _save(root, 5, best=12.0)  # the old best is an old checkpoint now
    assert _kept(root) == [names[4], names[5]]
    assert ckpt.resolve_checkpoint(root, best=True) == root / names[5]
    assert not list(root.glob(".*"))  # no temporary file left


def test_a_best_checkpoint_the_run_did_not_keep_is_one_line(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    _save(root, 1)
    with pytest.raises(UserError, match="no best checkpoint at .*: the run kept none"):
        ckpt.resolve_checkpoint(tmp_path, best=True)
    with pytest.raises(UserError, match="--best picks a checkpoint of a run: give the run dir"):
        ckpt.resolve_checkpoint(root / ckpt.checkpoint_dir_name(1), best=True)
