"""distrl's modules import one another without a cycle, counting what linters miss: imports
inside functions, ``importlib.import_module`` of distrl's own modules, and the ``module:attribute``
references the registries load; and, apart, without a cycle of imports of any kind, those for
annotations alone (``if TYPE_CHECKING:``) included. An edge goes to the module an import names (a
package's ``__init__`` when it names the package).

And imports point up a declared order of layers (``LAYERS``, the table in
``docs/reference/layout.md``): a module imports only from its own layer or the layers below, for
annotations too.
A registry's ``module:attribute`` strings are the one way down: they name the code an
algorithm, env backend or worker group brings, loaded only when a run uses it.

And what a process imports when it starts leaves out what only some runs need."""

from __future__ import annotations

import ast
import functools
import json
import re
from fnmatch import fnmatch
from pathlib import Path

import pytest

import distrl
from tests.helpers import CARTPOLE, run_python

ROOT = Path(distrl.__file__).parent
REFERENCE = re.compile(r"^(distrl(?:\.\w+)+):\w+$")
"""A ``module:attribute`` string naming one of distrl's modules (what the registries load)."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in ROOT.rglob("*.py")}

LAYERS: list[tuple[str, ...]] = [
    (  # shared helpers
        "distrl.errors", "distrl.quiet", "distrl.extras", "distrl.user_code", "distrl.env_backends",
        "distrl.env_packages",
        "distrl.usage", "distrl.allocator", "distrl.compile",
        "distrl.precision", "distrl.offload", "distrl.socket_sum", "distrl.learner_memory", "distrl.moved",
    ),
    ("distrl.config.base", "distrl.config.sections", "distrl.config.algorithm",
     "distrl.config.grpo_vocabulary"),
    ("distrl.sharding", "distrl.seeding", "distrl.timing"),  # helpers that read the sections
    # What each algorithm declares, torch-free: its section and entry (a package's own module, no deeper).
    ("distrl.algos.*_config", "distrl.algos.algorithm", r"re:distrl\.algorithms\.\w+",
     "distrl.algorithms.*.config"),
    ("distrl.algos.registry",),
    # the whole run's config, and the rules across its sections
    ("distrl.config", "distrl.config.rules", "distrl.config.run", "distrl.config.run_algorithm"),
    ("distrl.envs", "distrl.envs.*"),
    ("distrl.tasks", "distrl.tasks.*"),
    ("distrl.io", "distrl.io.*"),
    ("distrl.models", "distrl.models.*"),
    ("distrl.storage", "distrl.storage.*"),
    ("distrl.comm", "distrl.comm.*"),
    ("distrl.algos", "distrl.algos.*"),
    ("distrl.collect", "distrl.collect.*"),
    ("distrl.eval", "distrl.eval.*"),
    ("distrl.data", "distrl.data.*"),
    ("distrl.ope", "distrl.ope.*"),
    ("distrl.runners", "distrl.runners.*"),
    ("distrl.algorithms", "distrl.algorithms.*"),  # an algorithm package: networks, acting, update, runner
    ("distrl.launch", "distrl.launch.*"),
    ("distrl.entry",),
    ("distrl.ray", "distrl.ray.*"),
    ("distrl", "distrl.cli", "distrl.train", "distrl.__main__", "distrl.reference"),
]  # fmt: skip
"""distrl's layers, lowest first: a module belongs to the first layer with a pattern it matches."""


def matches(name: str, pattern: str) -> bool:
    """A glob (``*`` spans dots), or after ``re:`` a regular expression matching the whole name."""
    return bool(re.fullmatch(pattern[3:], name)) if pattern.startswith("re:") else fnmatch(name, pattern)


def layer_of(name: str) -> int:
    return next(index for index, patterns in enumerate(LAYERS) if any(matches(name, p) for p in patterns))


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


@functools.cache
def parsed(path: Path) -> ast.Module:
    """A module's syntax tree, read once: every check walks every module."""
    return ast.parse(path.read_text())


def imported(name: str, references: bool = True, type_checking: bool = True) -> set[str]:
    """The distrl modules ``name`` runs when imported or when any of its functions run; with
    ``references``, also those its ``module:attribute`` strings name; with ``type_checking``, also
    those it imports for annotations only (``if TYPE_CHECKING:``)."""
    tree = parsed(MODULES[name])
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and _is_type_checking(node) and not type_checking:
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
            submodules = {f"{base}.{alias.name}" for alias in node.names} & MODULES.keys()
            if len(submodules) < len(node.names):  # names a package's attribute, not only its modules
                found.add(base)
            found.update(submodules)
        elif (
            references
            and isinstance(node, ast.Constant)
            and isinstance(node.value, str)
            and REFERENCE.match(node.value)
        ):
            found.add(REFERENCE.match(node.value).group(1))
        elif _imports_by_name(node):
            found.add(node.args[0].value)
        pending.extend(ast.iter_child_nodes(node))
    return {target for target in found if target in MODULES} - {name}


def cycles(references: bool) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm): with
    ``references``, over what modules run (their imports and the ``module:attribute`` strings they
    load, annotations aside); else over every import, annotations' too. A reference points down
    on purpose (a registry naming what a higher layer brings), and the code it names may well
    import the registry's layer for its annotations: that is no cycle of imports."""
    graph = {name: imported(name, references, type_checking=not references) for name in MODULES}
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


@pytest.mark.parametrize("references", [True, False], ids=["what-runs", "every-import"])
def test_no_import_cycle_among_distrls_modules(references: bool) -> None:
    assert cycles(references) == []


def downward_imports() -> list[str]:
    """``importer -> imported`` for every import that points down the layers, annotations'
    (``if TYPE_CHECKING:``) too: no exemption."""
    return [
        f"{name} -> {target}"
        for name in sorted(MODULES)
        for target in sorted(imported(name, references=False))
        if layer_of(target) > layer_of(name)
    ]


def test_every_module_has_a_layer() -> None:
    assert [name for name in MODULES if not any(matches(name, p) for ps in LAYERS for p in ps)] == []


def test_imports_point_up_the_layers() -> None:
    assert downward_imports() == []


def test_the_layer_check_finds_an_import_inside_a_function(tmp_path: Path, monkeypatch) -> None:
    """The check itself can fail: a model that imports the training loop inside a function."""
    low = tmp_path / "low.py"
    low.write_text("def f():\n    from distrl.runners.loop import TrainingLoop\n")
    monkeypatch.setitem(MODULES, "distrl.models.low", low)
    assert downward_imports() == ["distrl.models.low -> distrl.runners.loop"]


def test_the_layers_are_the_ones_layout_md_lists() -> None:
    """The contributors' table lists the packages in the order of ``LAYERS``."""
    table = (ROOT.parents[1] / "docs" / "reference" / "layout.md").read_text()
    rows = re.findall(r"^\| `([\w/*.]+)`", table, re.M)
    packages = [p.removeprefix("distrl.") for ps in LAYERS for p in ps if p != "distrl"]
    listed = [row.removesuffix("/").removesuffix(".py").replace("/", ".") for row in rows]
    assert [name for name in listed if name in packages] == [name for name in packages if name in listed]


def test_the_checker_finds_a_cycle_hidden_in_a_function(tmp_path: Path, monkeypatch) -> None:
    """The check itself can fail: two modules that import each other, one inside a function and
    one through an ``import_module`` string, are one cycle."""
    one, two = tmp_path / "one.py", tmp_path / "two.py"
    one.write_text("def f():\n    from distrl.two import g\n")
    two.write_text("import importlib\n\ndef g():\n    importlib.import_module('distrl.one')\n")
    monkeypatch.setitem(MODULES, "distrl.one", one)
    monkeypatch.setitem(MODULES, "distrl.two", two)
    assert ["distrl.one", "distrl.two"] in cycles(references=True)


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
        tree = parsed(MODULES[name])
        names = {
            alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names
        }
        names |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not {n for n in names if n == "ray" or n.startswith("ray.")}, name


_SHARDING_IMPORTS_OF_A_RUN = """
import json, os, sys

def loaded():
    return [m for m in ("torch.distributed.checkpoint", "torch.distributed.tensor") if m in sys.modules]

import distrl.entry
at_start = loaded()
from distrl.cli import main
code = main(["train", "--config", sys.argv[1], "--run-dir", sys.argv[2], "train.total_steps=256",
             "log.tensorboard=false", "log.progress=false"])
print(json.dumps({"code": code, "at_start": at_start, "after_run": loaded()}), flush=True)
os._exit(0)  # as ``distrl.cli.run`` exits, without the interpreter's teardown
"""


def test_start_up_imports_no_sharded_checkpoint_or_dtensor(tmp_path: Path) -> None:
    """Every distrl process (a CLI call, a torchrun rank, a Ray actor) imports ``distrl.entry``,
    which leaves out torch's distributed checkpoint and DTensor: most of a second, that only a
    sharded learner or checkpoint needs. A run that checkpoints a learner that is not sharded
    imports no distributed checkpoint either (DTensor it does: ``torch._dynamo`` imports it, and
    torch's optimisers import that)."""
    result = run_python("-c", _SHARDING_IMPORTS_OF_A_RUN, str(CARTPOLE), str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout.splitlines()[-1])
    assert (loaded["code"], loaded["at_start"]) == (0, [])
    assert "torch.distributed.checkpoint" not in loaded["after_run"]
    assert list((tmp_path / "run" / "checkpoints").iterdir())  # it did write a checkpoint


def test_an_env_process_imports_no_torch() -> None:
    """An env stepped in a process of its own (``env.backend=gymnasium_async``) loads its
    observation check from ``distrl.envs``, whose package imports no torch: seconds of each env
    process's start-up (4 envs on 2 cores took 20 s to start)."""
    check = "import sys, distrl.envs.observation_check; print('torch' in sys.modules)"
    result = run_python("-c", check)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False"]
