"""A user's own code named in a config (``module:Class`` envs, ``module:function`` rewards),
imported as ``python -m`` would: from installed packages or the current directory, which the
``distrl`` console script does not put on the path by itself."""

from __future__ import annotations

import importlib
import os
import sys
from types import ModuleType


def import_user_module(name: str) -> ModuleType:
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    return importlib.import_module(name)
