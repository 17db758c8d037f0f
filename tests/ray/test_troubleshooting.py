"""Runs every row of the troubleshooting page's Ray-mode table against the session's Ray head
and checks the one line it documents."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import pytest

from tests.helpers import REPO, distrl
from tests.test_troubleshooting import table_rows

ROWS = table_rows("## Ray mode")


def test_the_table_covers_the_ray_cases() -> None:
    assert len(ROWS) >= 10


@pytest.mark.parametrize(("problem", "args", "message"), ROWS, ids=[row[0] for row in ROWS])
@pytest.mark.slow
def test_ray_troubleshooting_row(
    ray_head: str, tmp_path: Path, problem: str, args: str, message: str
) -> None:
    (tmp_path / "configs").symlink_to(REPO / "configs")
    started = time.monotonic()
    result = distrl(*shlex.split(args.replace("HEAD", ray_head)), cwd=tmp_path, timeout=120)
    assert result.returncode == 2, result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith(message), f"{lines[0]!r} does not start with {message!r}"
    assert time.monotonic() - started < 60
    assert not (tmp_path / "runs").exists()  # nothing started, nothing written
