"""Runs every row of the troubleshooting page's table (docs/troubleshooting.md) and checks the
message it documents."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest

from tests.helpers import REPO, distrl

ROW = re.compile(r"^\| (?P<problem>[^|]+) \| `distrl (?P<args>[^`]+)` \| (?P<message>.+) \|$")


PAGE = REPO / "docs" / "troubleshooting.md"


def table_rows(heading: str = "## Training and configuration") -> list[tuple[str, str, str]]:
    """(problem, distrl's arguments, message) of the page's table under ``heading``, up to the
    next heading of its level or above."""
    text = PAGE.read_text()
    level = len(heading.split(" ", 1)[0])
    section = re.split(rf"\n#{{1,{level}}} ", text.split(f"\n{heading}\n", 1)[1], maxsplit=1)[0]
    rows = [ROW.match(line) for line in section.splitlines()]
    return [(m["problem"].strip(), m["args"], m["message"].strip()) for m in rows if m]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("troubleshooting")
    shutil.copytree(REPO / "configs", work / "configs")
    result = distrl(
        "train", "--config", "configs/cartpole_ppo.yaml", "--run-dir", "runs/existing",
        "--total-steps", "512", "train.stop_return=null", cwd=work,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    return work


def test_the_table_covers_every_documented_case() -> None:
    assert len(table_rows()) >= 20


@pytest.mark.parametrize(("problem", "args", "message"), table_rows(), ids=[r[0] for r in table_rows()])
@pytest.mark.slow
def test_troubleshooting_row(workdir: Path, problem: str, args: str, message: str) -> None:
    before = sorted(p.relative_to(workdir) for p in (workdir / "runs").rglob("*"))
    result = distrl(*shlex.split(args), cwd=workdir)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(message), f"{lines[0]!r} does not start with {message!r}"
    after = sorted(p.relative_to(workdir) for p in (workdir / "runs").rglob("*"))
    assert after == before  # nothing written, nothing lost
