"""Every command of the README's tour and of the getting-started page, run as a user would from
a fresh directory holding the shipped configs (``make demo`` from the repository), in the page's
order, with ``distrl`` and ``python`` from this environment on the path. Training commands (and
``make demo``'s, through ``DEMO_ARGS``) get a short budget appended (``SHORT``); the Ray command
joins the session's Ray head through ``RAY_ADDRESS``, as Ray's own tools do. ``source`` lines are
what the PATH set here does. ``distrl ...`` runs as ``tests.helpers.distrl`` does: forked from a
process that has imported distrl, as ``python -m distrl``."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO, clean_env, distrl

PAGES = {"README.md": 10, "docs/getting-started.md": 7}
"""Each page and the fewest commands it holds (a parsing slip cannot pass as an empty page)."""
SHORT = ("train.total_steps=2048", "train.stop_return=null")


def commands(page: Path) -> list[str]:
    """The commands of the page's ```bash blocks, continuation lines joined, comments dropped."""
    found = []
    for block in re.findall(r"```bash\n(.*?)```", page.read_text(), flags=re.DOTALL):
        text = block.replace("\\\n", " ")
        found += [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return found


def shortened(command: str) -> list[str]:
    argv = shlex.split(command)
    if argv == ["make", "demo"]:
        return [*argv, f"DEMO_ARGS={' '.join(SHORT)}"]
    trains = argv[:2] == ["distrl", "train"] or "distrl.train" in argv
    assert not (trains and "--total-steps" in argv), "a shown budget would not be shortened"
    return [*argv, *SHORT] if trains else argv


@pytest.mark.parametrize("page", sorted(PAGES))
@pytest.mark.slow
def test_every_shown_command_runs(page: str, ray_head: str, tmp_path: Path) -> None:
    shown = commands(REPO / page)
    assert len(shown) >= PAGES[page]
    (tmp_path / "configs").symlink_to(REPO / "configs")
    env = clean_env()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["RAY_ADDRESS"] = ray_head
    for command in shown:
        if command.startswith("source "):
            continue
        argv, cwd = shortened(command), REPO if command.startswith("make ") else tmp_path
        if argv[0] == "distrl":
            result = distrl(*argv[1:], cwd=cwd, env=env, timeout=900)
        else:
            result = subprocess.run(
                argv, cwd=cwd, env=env, capture_output=True, text=True, check=False, timeout=900
            )
        assert result.returncode == 0, f"{page}: {command}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
