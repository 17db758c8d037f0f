"""Code named in a config or a registry as ``module:attribute`` (a user's ``module:Class`` envs,
``module:function`` rewards and algorithms; distrl's own registries), imported as ``python -m``
would: from installed packages or the current directory, which the ``distrl`` console script
does not put on the path by itself."""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType
from typing import Any


def import_user_module(name: str) -> ModuleType:
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    return importlib.import_module(name)


def load(reference: str) -> Any:
    """The attribute a ``module:attribute`` reference names, its module imported now."""
    module, _, name = reference.partition(":")
    return getattr(import_user_module(module), name)
