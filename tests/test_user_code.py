"""A user's module named as ``module:attribute`` that cannot be used is one line naming the
setting, the file and line, and the cause: a module that is nowhere, one with a syntax error,
one importing a package that is not installed, one raising while it runs, a missing attribute.
Each from a real package written in a temporary directory and imported from there, as
``python -m`` would (the current directory); on the command line, exit code 2 and one line."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from distrl.errors import UserError
from distrl.user_code import load
from tests.helpers import distrl
from tests.test_cli import assert_user_error

MODULES = {
    "nothing_wrong.py": "VALUE = 1\n",
    "syntax.py": "def f(:\n    pass\n",
    "missing_dependency.py": "import os\n\nimport distrl_no_such_package  # not installed\n",
    "raises.py": "X = 1\n\n\ndef build():\n    raise RuntimeError('no licence file')\n\n\nbuild()\n",
    "library_raises.py": "import json\n\nCONFIG = json.loads('{not json')\n",
}


@pytest.fixture
def package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``userpkg`` with one module per way to fail, in the current directory; forgotten afterwards."""
    root = tmp_path / "userpkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    for name, text in MODULES.items():
        (root / name).write_text(text)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    yield root
    for name in [m for m in sys.modules if m == "userpkg" or m.startswith("userpkg.")]:
        del sys.modules[name]


def refusal(reference: str) -> str:
    with pytest.raises(UserError) as refused:
        load(reference, f"env.id {reference!r}")
    line = str(refused.value)
    assert "\n" not in line and line.startswith(f"env.id {reference!r}: "), line
    return line


def test_a_module_from_the_current_directory_loads(package: Path) -> None:
    assert load("userpkg.nothing_wrong:VALUE") == 1


def test_each_way_a_users_module_fails_is_its_cause_and_place(package: Path) -> None:
    assert refusal("userpkg.nowhere:Env").endswith(
        f"no module 'userpkg.nowhere' in the current directory ({package.parent}), on PYTHONPATH "
        "or among the installed packages"
    )
    assert refusal("nopkg.envs:Env").endswith(
        f"no module 'nopkg' in the current directory ({package.parent}), on PYTHONPATH or among the "
        "installed packages"
    )
    assert refusal("userpkg.syntax:Env").endswith(
        f"syntax error at {package / 'syntax.py'}:1: invalid syntax"
    )
    assert refusal("userpkg.missing_dependency:Env").endswith(
        f"{package / 'missing_dependency.py'}:3 imports 'distrl_no_such_package', which is not installed"
    )
    assert refusal("userpkg.raises:Env").endswith(
        f"importing 'userpkg.raises' raised RuntimeError: no licence file (at {package / 'raises.py'}:5)"
    )
    # Raised inside the standard library: the place is the user's line that called it.
    assert refusal("userpkg.library_raises:Env").endswith(f"(at {package / 'library_raises.py'}:3)")
    assert refusal("userpkg.nothing_wrong:Env").endswith(
        f"module 'userpkg.nothing_wrong' ({package / 'nothing_wrong.py'}) has no attribute 'Env'"
    )


def test_distrls_own_modules_keep_their_traceback() -> None:
    """A failure importing distrl's own code is a bug, not the user's input."""
    with pytest.raises(ModuleNotFoundError):
        load("distrl.no_such_module:X")


@pytest.mark.slow
def test_on_the_command_line_it_is_one_line_and_exit_2(package: Path, tmp_path: Path) -> None:
    result = distrl("train", "--env", "userpkg.syntax:Env", "--run-dir", str(tmp_path / "run"), cwd=tmp_path)
    assert_user_error(result, f"env.id 'userpkg.syntax:Env': syntax error at {package / 'syntax.py'}:1")
    assert not (tmp_path / "run").exists()
