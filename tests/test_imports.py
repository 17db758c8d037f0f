"""distrl's modules import one another without a cycle, counting what linters miss: imports
inside functions, ``importlib.import_module`` of distrl's own modules, and the ``module:attribute``
references the registries load (imports under ``if TYPE_CHECKING:`` aside, which never run).
An edge goes to the module an import names (a package's ``__init__`` when it names the package)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import distrl

ROOT = Path(distrl.__file__).parent
REFERENCE = re.compile(r"^(distrl(?:\.\w+)+):\w+$")
"""A ``module:attribute`` string naming one of distrl's modules (what the registries load)."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in ROOT.rglob("*.py")}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports_by_name(node: ast.AST) -> bool:
    """``importlib.import_module("distrl....")`` (or ``import_module(...)``) with a literal name."""
    if not isinstance(node, ast.Call) or not node.args or not isinstance(node.args[0], ast.Constant):
        return False
    func = node.func
    called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return called == "import_module" and str(node.args[0].value).startswith("distrl")


def imported(name: str) -> set[str]:
    """The distrl modules ``name`` runs when imported or when any of its functions run."""
    tree = ast.parse(MODULES[name].read_text())
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and _is_type_checking(node):
            pending.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and REFERENCE.match(node.value):
            found.add(REFERENCE.match(node.value).group(1))
        elif _imports_by_name(node):
            found.add(node.args[0].value)
        pending.extend(ast.iter_child_nodes(node))
    return {target for target in found if target in MODULES} - {name}


def cycles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    graph = {name: imported(name) for name in MODULES}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def test_no_import_cycle_among_distrls_modules() -> None:
    assert cycles() == []


def test_the_checker_finds_a_cycle_hidden_in_a_function(tmp_path: Path, monkeypatch) -> None:
    """The check itself can fail: two modules that import each other, one inside a function and
    one through an ``import_module`` string, are one cycle."""
    one, two = tmp_path / "one.py", tmp_path / "two.py"
    one.write_text("def f():\n    from distrl.two import g\n")
    two.write_text("import importlib\n\ndef g():\n    importlib.import_module('distrl.one')\n")
    monkeypatch.setitem(MODULES, "distrl.one", one)
    monkeypatch.setitem(MODULES, "distrl.two", two)
    assert ["distrl.one", "distrl.two"] in cycles()


def test_launch_imports_nothing_of_ray() -> None:
    """``distrl.launch`` knows how processes started; Ray mode is a package of its own. Nothing
    ``launch`` runs, directly or through the modules it imports, imports Ray."""
    reached, pending = set(), [name for name in MODULES if name.startswith("distrl.launch")]
    while pending:
        name = pending.pop()
        if name not in reached:
            reached.add(name)
            pending.extend(imported(name))
    assert not {name for name in reached if name.startswith("distrl.ray")}
    for name in reached:
        tree = ast.parse(MODULES[name].read_text())
        names = {
            alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
        }
        names |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not {n for n in names if n == "ray" or n.startswith("ray.")}, name
