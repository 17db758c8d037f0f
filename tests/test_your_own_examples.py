"""Every command of ``docs/algorithms/your-own.md``'s ```bash blocks, in the page's order, run from
a temporary copy of ``examples/your_own/`` (the page's ``cd examples/your_own``), so the guide and
its two plug-ins (REINFORCE on the on-policy loop, DDPG on the replay loop) cannot drift apart.

Each training command gets a short budget appended (``SHORT``, by its config); ``torchrun`` runs as
``python -m torch.distributed.run`` (what the ``torchrun`` script runs) on a free port, so
parallel tests never meet on its default one. ``distrl ...`` runs as ``tests.helpers.distrl``
does. Then the runs' outputs must be there: evaluations' lines, exported files, and the 2-rank
DDPG run's checkpoint with both ranks in its metrics. The page's ```python excerpts are lines of the
example files, word for word."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.distributed import free_port
from tests.helpers import REPO, clean_env, distrl, run_python
from tests.test_docs_examples import commands

PAGE = REPO / "docs" / "algorithms" / "your-own.md"
EXAMPLES = REPO / "examples" / "your_own"
SHORT = {
    "reinforce_cartpole.yaml": ("train.total_steps=2048", "train.stop_return=null"),
    # 200 rounds of 2 gradient steps after 400 random steps: every line of the update runs.
    "ddpg_pendulum.yaml": ("train.total_steps=800", "algo.learning_starts=400", "train.stop_return=null"),
}
"""A short budget per config, appended to each training command that names it."""


def option(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def shortened(argv: list[str]) -> list[str]:
    if "train" not in argv and "distrl.train" not in argv:
        return argv
    assert "--total-steps" not in argv, "a shown budget would not be shortened"
    return [*argv, *SHORT[option(argv, "--config")]]


def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    if argv[0] == "distrl":
        return distrl(*argv[1:], cwd=cwd, env=clean_env())
    assert argv[0] == "torchrun", argv
    port = ["--master_addr=127.0.0.1", f"--master_port={free_port()}"]
    return run_python("-m", "torch.distributed.run", *port, *argv[1:], cwd=cwd)


@pytest.mark.slow
def test_every_command_of_the_guide_runs_from_a_copy_of_the_examples(tmp_path: Path) -> None:
    shown = [shlex.split(command) for command in commands(PAGE)]
    assert len(shown) >= 8 and shown[0] == ["cd", "examples/your_own"], shown[:1]
    copy = tmp_path / "your_own"
    shutil.copytree(EXAMPLES, copy, ignore=shutil.ignore_patterns("__pycache__", "runs"))
    said: dict[str, str] = {}
    for argv in shown[1:]:
        result = run(shortened(argv), copy)
        assert result.returncode == 0, f"{shlex.join(argv)}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
        said[shlex.join(argv)] = result.stdout

    evaluated = [argv for argv in shown if argv[:2] == ["distrl", "eval"]]
    assert len(evaluated) == 2  # one per example
    for argv in evaluated:
        assert "over 10 deterministic episodes" in said[shlex.join(argv)]
    exported = [argv for argv in shown if argv[:2] == ["distrl", "export"]]
    assert exported
    for argv in exported:
        assert (copy / option(argv, "--out")).stat().st_size > 0

    (ranks,) = [argv for argv in shown if argv[0] == "torchrun"]
    run_dir = copy / option(ranks, "--run-dir")
    assert (run_dir / "checkpoints" / "step_000000000800" / "state.json").is_file()
    last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    assert last["ranks"] == 2 and last["global_step"] == 800 and last["critic_loss"] > 0
    assert last["skipped_steps"] == 0


def test_every_excerpt_on_the_guide_is_lines_of_an_example_file() -> None:
    """The page shows parts of the files rather than copies that could drift from them."""
    sources = {path.name: path.read_text() for path in EXAMPLES.glob("*.py")}
    excerpts = re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)
    assert len(excerpts) >= 8
    for excerpt in excerpts:
        assert any(excerpt in text for text in sources.values()), f"in no file of {EXAMPLES}:\n{excerpt}"
