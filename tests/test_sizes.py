"""Rooms of one idea: no source file over ``FILE_LINES`` lines and no function over
``FUNCTION_LINES``, but for the files and functions below, each with its reason and today's size as
a ceiling it may not grow past (and is dropped from the list once it fits)."""

from __future__ import annotations

import ast
from pathlib import Path

import distrl

ROOT = Path(distrl.__file__).parent
FILE_LINES = 400
FUNCTION_LINES = 60

LARGE_FILES: dict[str, tuple[int, str]] = {
    "cli.py": (682, "every subcommand's handler beside the table: to split per command"),
    "collect/processes.py": (
        530,
        "collector processes and their supervision (the schedule is collect/ahead.py's)",
    ),
    "runners/loop.py": (517, "the one loop: stop rules, evaluation, checkpoints, the final line"),
    "config/run.py": (439, "the whole config read: keys, sections, groups and their old names"),
    "ray/workers.py": (511, "retries, failure causes and queued calls of every worker group"),
    "config/sections.py": (479, "every shared section: to split with the rules beside their owners"),
    "data/logged.py": (476, "the logged-data schema, its validation and reading shared over ranks"),
}
"""Files over ``FILE_LINES``, by path under ``src/distrl``: (ceiling, why)."""

LONG_FUNCTIONS: dict[str, tuple[int, str]] = {
    "runners/loop.py:run": (81, "the loop itself, read top to bottom: collect, update, log, check, save"),
    "runners/grpo.py:iteration": (67, "one GRPO step: generate, score, advantages, update, in order"),
    "collect/processes.py:run_part": (81, "a collector process's whole life, its loop and its exits"),
    "models/generate.py:generate": (76, "the decoding loop with its cache, sampling and ends"),
    "runners/grpo.py:__init__": (71, "GRPO's learner set-up: one learner set-up for every runner (issue 59)"),
    "ray/driver.py:check_fits": (70, "every group's CPUs and GPUs against the cluster, each with its line"),
    "runners/loop.py:_metrics_row": (61, "the metrics row's keys in one place"),
}
"""Functions over ``FUNCTION_LINES``, as ``path:name``: (ceiling, why)."""


def sizes(root: Path) -> tuple[dict[str, int], dict[str, int]]:
    """Line counts of the files and of the functions (``path:name``, methods by their own name)."""
    files, functions = {}, {}
    for path in sorted(root.rglob("*.py")):
        name = path.relative_to(root).as_posix()
        text = path.read_text()
        files[name] = len(text.splitlines())
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                key = f"{name}:{node.name}"
                functions[key] = max(functions.get(key, 0), node.end_lineno - node.lineno + 1)
    return files, functions


def over(measured: dict[str, int], limit: int, exempt: dict[str, tuple[int, str]]) -> list[str]:
    """A line for each size over ``limit`` and not exempt, over its ceiling, or exempt no longer."""
    problems = [
        f"{name}: {n} lines (limit {limit})"
        for name, n in measured.items()
        if n > limit and name not in exempt
    ]
    for name, (ceiling, _) in exempt.items():
        n = measured.get(name, 0)
        if n > ceiling:
            problems.append(f"{name}: {n} lines, past its ceiling {ceiling}: split it rather than raise it")
        elif n <= limit:
            problems.append(f"{name}: {n} lines fits the limit now: drop its exemption")
    return problems


def test_no_file_or_function_grows_past_its_limit() -> None:
    files, functions = sizes(ROOT)
    assert over(files, FILE_LINES, LARGE_FILES) == []
    assert over(functions, FUNCTION_LINES, LONG_FUNCTIONS) == []


def test_the_check_finds_a_long_function_and_a_stale_exemption(tmp_path: Path) -> None:
    (tmp_path / "long.py").write_text("def f():\n" + "    x = 1\n" * 70)
    files, functions = sizes(tmp_path)
    assert over(functions, FUNCTION_LINES, {}) == ["long.py:f: 71 lines (limit 60)"]
    assert over(files, FILE_LINES, {"long.py": (71, "why")}) == [
        "long.py: 71 lines fits the limit now: drop its exemption"
    ]
