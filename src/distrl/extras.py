"""Optional extras: one line naming the extra to install when one of its own packages is
missing. Only then: a package that is installed but fails to import (a bug in distrl's code
that uses it, an incompatible version) raises its own error, with its traceback."""

from __future__ import annotations

import importlib.util

from distrl.errors import UserError


def require_extra(extra: str, packages: tuple[str, ...], need: str) -> None:
    """``need`` (what needs the extra, in the user's words) and the install line when any of
    ``packages`` (top-level import names) is not installed."""
    if any(importlib.util.find_spec(package) is None for package in packages):
        raise UserError(f"{need}: pip install 'distrl[{extra}]'", code="install-extra-missing")


JAX = ("jax", ("jax", "flax", "optax"), "ml_framework: jax needs JAX, Flax and Optax")
"""JAX learners (``require_extra``'s arguments)."""
RAY = ("ray", ("ray",), "--launcher ray needs Ray")
TRANSFORMERS = ("transformers", ("transformers", "tokenizers"), "--format transformers needs transformers")
PRETRAINED = (
    "transformers",
    ("transformers", "tokenizers"),
    "model.transformer.pretrained needs transformers",
)
ENV_PACKAGES = {"ale_py": "atari", "minigrid": "minigrid"}
"""``env.imports`` modules an extra installs, by module."""
