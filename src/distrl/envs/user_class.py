"""``env.id: package.module:Class``: a user's own env class, imported by name."""

from __future__ import annotations

from distrl.errors import UserError
from distrl.user_code import import_user_module


def is_class_spec(env_id: str) -> bool:
    return ":" in env_id


def import_env_class(spec: str) -> type:
    """Import as ``python -m`` would (``distrl.user_code``)."""
    module_name, _, class_name = spec.partition(":")
    try:
        module = import_user_module(module_name)
    except ImportError as exc:
        raise UserError(
            f"env.id {spec!r}: cannot import module {module_name!r}: {exc}", code="env-module-import-failed"
        ) from None
    env_cls = getattr(module, class_name, None)
    if env_cls is None:
        raise UserError(
            f"env.id {spec!r}: module {module_name!r} has no attribute {class_name!r}",
            code="env-class-missing",
        )
    return env_cls
