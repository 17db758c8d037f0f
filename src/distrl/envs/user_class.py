"""``env.id: package.module:Class``: a user's own env class, imported by name."""

from __future__ import annotations

from distrl.user_code import load


def is_class_spec(env_id: str) -> bool:
    return ":" in env_id


def import_env_class(spec: str) -> type:
    """Import as ``python -m`` would (``distrl.user_code``)."""
    return load(spec, f"env.id {spec!r}")
