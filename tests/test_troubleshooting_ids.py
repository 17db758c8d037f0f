"""Every refusal in ``src/distrl`` carries a literal id (``UserError(..., code="...")``), and
docs/troubleshooting.md's "Every refusal, by id" table has one row per id in use: checked
statically, reading the source with ``ast`` and the page as text."""

from __future__ import annotations

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src" / "distrl"
PAGE = REPO / "docs" / "troubleshooting.md"
HEADING = "## Every refusal, by id"

ID = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)+$")
"""Kebab-case, its first word the area (``config``, ``env``, ``ray``, ...)."""
ROW = re.compile(r"^\| `(?P<id>[^`]+)` \| (?P<refused>[^|]*[^| ]) \| (?P<todo>[^|]*[^| ]) \|$")

PASSED_ON: dict[tuple[str, str], tuple[str, str]] = {
    ("ray/workers.py", "raise_user_error"): (
        "cause.code",
        "a Ray worker's UserError, raised again on the caller's side as the user's one line",
    ),
    ("collect/processes.py", "take"): (
        "code",
        "a collector process's UserError, sent to its learner as its message and id",
    ),
    ("comm/base.py", "run_on_main"): (
        "code or None",
        "rank 0's UserError, broadcast to every rank as its id and message",
    ),
}
"""The only raises whose ``code=`` is not a literal: ``(file under src/distrl, function)`` to
``(the code expression, why)``. Each passes on the id of a UserError raised elsewhere (whose own
raise has a literal id), so the refusal keeps its id wherever it is reported."""


@dataclass(frozen=True)
class Site:
    where: str
    """``file:line``, the file under src/distrl."""
    function: str
    code: ast.expr | None
    """The ``code=`` argument; None when the call has none."""


def _calls(tree: ast.AST, function: str = "<module>") -> list[tuple[ast.Call, str]]:
    """Every ``UserError(...)`` call under ``tree``, with the innermost function around it."""
    found = []
    for node in ast.iter_child_nodes(tree):
        inner = node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else function
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
            if name == "UserError":
                found.append((node, function))
        found += _calls(node, inner)
    return found


@functools.cache
def sites() -> tuple[Site, ...]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        relative = path.relative_to(SRC).as_posix()
        for call, function in _calls(ast.parse(path.read_text(), str(path))):
            code = next((kw.value for kw in call.keywords if kw.arg == "code"), None)
            found.append(Site(f"{relative}:{call.lineno}", function, code))
    return tuple(found)


def literal(site: Site) -> str | None:
    if isinstance(site.code, ast.Constant) and isinstance(site.code.value, str):
        return site.code.value
    return None


def ids_in_use() -> dict[str, list[str]]:
    """Each literal id, with the sites that raise it."""
    used: dict[str, list[str]] = {}
    for site in sites():
        code = literal(site)
        if code is not None:
            used.setdefault(code, []).append(site.where)
    return used


@functools.cache
def table() -> tuple[tuple[str, str, str], ...]:
    """(id, what was refused, what to do) of each row of the page's table, in the page's order."""
    text = PAGE.read_text()
    assert f"\n{HEADING}\n" in text, f"{PAGE.name} has no section {HEADING!r}"
    section = re.split(r"\n#{1,2} ", text.split(f"\n{HEADING}\n", 1)[1], maxsplit=1)[0]
    lines = [line for line in section.splitlines() if line.startswith("|")]
    assert lines[:2] == ["| id | what was refused | what to do |", "| --- | --- | --- |"], lines[:2]
    rows = []
    for line in lines[2:]:
        match = ROW.match(line)
        assert match, f"{PAGE.name}: not a row of three non-empty cells, the id in backticks: {line!r}"
        rows.append((match["id"], match["refused"], match["todo"]))
    return tuple(rows)


def test_the_walk_finds_the_refusals() -> None:
    assert len(sites()) >= 200  # about 230 today: a walk that finds none would pass everything


def test_every_refusal_has_a_literal_id() -> None:
    wrong = []
    for site in sites():
        file = site.where.rsplit(":", 1)[0]
        code = literal(site)
        if code is not None:
            if not ID.match(code):
                wrong.append(f"{site.where}: code={code!r} is not a kebab-case id such as 'env-id-unknown'")
            continue
        if site.code is None:
            wrong.append(f'{site.where}: UserError(...) without code="..."')
            continue
        allowed = PASSED_ON.get((file, site.function))
        shown = ast.unparse(site.code)
        if allowed is None or allowed[0] != shown:
            wrong.append(
                f"{site.where}: code={shown} in {site.function}() is not a string literal (only the "
                "raises in PASSED_ON may pass on another UserError's id)"
            )
    assert not wrong, "\n".join(wrong)


def test_every_passed_on_id_is_still_raised_there() -> None:
    """An entry of ``PASSED_ON`` whose raise is gone or changed is left out of the list."""
    present = {(site.where.rsplit(":", 1)[0], site.function) for site in sites() if literal(site) is None}
    assert not set(PASSED_ON) - present, sorted(set(PASSED_ON) - present)


def test_every_id_has_a_row() -> None:
    rows = {row[0] for row in table()}
    missing = [
        f"{code} (raised at {', '.join(where)})" for code, where in ids_in_use().items() if code not in rows
    ]
    assert not missing, f"ids with no row under {HEADING!r} in {PAGE.name}:\n" + "\n".join(sorted(missing))


def test_every_row_is_an_id_in_use() -> None:
    stale = sorted({row[0] for row in table()} - set(ids_in_use()))
    assert not stale, f"rows under {HEADING!r} in {PAGE.name} whose id no refusal raises: {stale}"


def test_no_id_has_two_rows() -> None:
    ids = [row[0] for row in table()]
    twice = sorted({code for code in ids if ids.count(code) > 1})
    assert not twice, f"ids with more than one row under {HEADING!r}: {twice}"


def test_rows_are_sorted_by_area_then_id() -> None:
    ids = [row[0] for row in table()]
    ordered = sorted(ids, key=lambda code: (code.split("-", 1)[0], code))
    first = next((mine for mine, want in zip(ids, ordered, strict=True) if mine != want), None)
    assert ids == ordered, f"rows under {HEADING!r} out of order, first at {first!r}"
