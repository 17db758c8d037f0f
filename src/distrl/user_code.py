"""Code named in a config or a registry as ``module:attribute`` (a user's ``module:Class`` envs,
``module:function`` rewards and algorithms; distrl's own registries), imported as ``python -m``
would: from installed packages or the current directory, which the ``distrl`` console script
does not put on the path by itself. Whatever goes wrong while a user's module is imported is one
line naming the setting, the file and line, and the cause."""

from __future__ import annotations

import importlib
import os
import sys
import sysconfig
import traceback
from pathlib import Path
from types import ModuleType
from typing import Any, NoReturn

from distrl.errors import UserError


def import_user_module(name: str, setting: str = "") -> ModuleType:
    """``name`` imported; a failure is a ``UserError`` starting with ``setting`` (the config key
    or flag that named it, with its value), its cause and where it arose."""
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    if name == "distrl" or name.startswith("distrl."):
        return importlib.import_module(name)  # distrl's own: a failure is a bug, with its traceback
    try:
        return importlib.import_module(name)
    except Exception as exc:  # the user's module may raise anything while it runs
        refuse_import(setting or repr(name), name, exc)


def load(reference: str, setting: str = "") -> Any:
    """The attribute a ``module:attribute`` reference names, its module imported now."""
    module_name, _, name = reference.partition(":")
    where = setting or repr(reference)
    module = import_user_module(module_name, where)
    if not hasattr(module, name):
        raise UserError(
            f"{where}: module {module_name!r} ({_file_of(module)}) has no attribute {name!r}",
            code="plugin-attribute-missing",
        )
    return getattr(module, name)


def refuse_import(setting: str, name: str, exc: Exception) -> NoReturn:
    """Why importing module ``name`` failed, as one line: the file and line where it did."""
    if isinstance(exc, ModuleNotFoundError) and exc.name is not None:
        if name == exc.name or name.startswith(f"{exc.name}."):
            raise UserError(
                f"{setting}: no module {exc.name!r} in the current directory ({os.getcwd()}), on "
                "PYTHONPATH or among the installed packages",
                code="plugin-module-not-found",
            ) from None
        raise UserError(
            f"{setting}: {user_frame(exc)} imports {exc.name!r}, which is not installed",
            code="plugin-dependency-missing",
        ) from None
    if isinstance(exc, SyntaxError):
        raise UserError(
            f"{setting}: syntax error at {exc.filename}:{exc.lineno}: {exc.msg}", code="plugin-syntax-error"
        ) from None
    raise UserError(
        f"{setting}: importing {name!r} raised {type(exc).__name__}: {exc} (at {user_frame(exc)})",
        code="plugin-import-raised",
    ) from None


def user_frame(exc: BaseException) -> str:
    """``file:line`` of the innermost frame of ``exc``'s traceback in the user's own code (not in
    Python's import machinery, the standard library or an installed package); else the innermost."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
    if not frames:
        return "?"
    libraries = {sysconfig.get_paths()[key] for key in ("stdlib", "purelib", "platlib")}
    libraries.add(str(Path(__file__).parent))  # distrl's own files, wherever it is installed
    own = [f for f in frames if not any(_within(f.filename, lib) for lib in libraries)]
    frame = (own or frames)[-1]
    return f"{frame.filename}:{frame.lineno}"


def _within(filename: str, directory: str) -> bool:
    return Path(filename).resolve().is_relative_to(Path(directory).resolve())


def _file_of(module: ModuleType) -> str:
    return getattr(module, "__file__", None) or module.__name__
