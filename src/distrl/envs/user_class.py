"""``env.id: package.module:Class``: a user's own env class, imported by name."""

from __future__ import annotations

import importlib
import os
import sys

from distrl.errors import UserError


def is_class_spec(env_id: str) -> bool:
    return ":" in env_id


def import_env_class(spec: str) -> type:
    """Import as ``python -m`` would: from installed packages or the current directory (the
    ``distrl`` console script does not put it on the path by itself)."""
    module_name, _, class_name = spec.partition(":")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UserError(f"env.id {spec!r}: cannot import module {module_name!r}: {exc}") from None
    env_cls = getattr(module, class_name, None)
    if env_cls is None:
        raise UserError(f"env.id {spec!r}: module {module_name!r} has no attribute {class_name!r}")
    return env_cls
