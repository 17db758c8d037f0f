"""The packages ``env.imports`` names, imported wherever envs are made: a learner, an env or eval
worker, or a process of its own that steps one env (``env.backend: gymnasium_async``)."""

from __future__ import annotations

import importlib
import importlib.util

from distrl import extras
from distrl.errors import UserError
from distrl.extras import require_extra


def import_env_packages(modules: list[str]) -> None:
    """Import ``env.imports`` (each registers its env ids when imported); one line for a module
    that is not installed. An installed one that fails to import raises its own error."""
    for module in modules:
        if module in extras.ENV_PACKAGES:
            require_extra(extras.ENV_PACKAGES[module], (module,), f"env.imports: {module}")
        if importlib.util.find_spec(module) is None:
            raise UserError(
                f"env.imports: no module {module!r} is installed (install the package that "
                "registers your env ids, or remove it from env.imports)",
                code="env-imports-missing",
            )
        importlib.import_module(module)
