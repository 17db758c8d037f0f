"""Modules that moved, importable by their old names for one release: a plug-in that imports
``distrl.algos.sac`` (or names ``distrl.collect.sac:actor_copies`` in its ``Algorithm``) gets the
module at its new place, and one line on stderr saying where that is."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import ModuleType

MOVED = {
    "distrl.algos.a2c": "distrl.algorithms.a2c.update",
    "distrl.algos.a2c_config": "distrl.algorithms.a2c.config",
    "distrl.runners.a2c": "distrl.algorithms.a2c.runner",
    "distrl.algos.appo": "distrl.algorithms.appo.update",
    "distrl.algos.appo_config": "distrl.algorithms.appo.config",
    "distrl.algos.vtrace": "distrl.algorithms.appo.vtrace",
    "distrl.runners.appo": "distrl.algorithms.appo.runner",
    "distrl.algos.sac": "distrl.algorithms.sac.update",
    "distrl.algos.sac_config": "distrl.algorithms.sac.config",
    "distrl.models.sac": "distrl.algorithms.sac.networks",
    "distrl.collect.sac": "distrl.algorithms.sac.acting",
    "distrl.runners.sac": "distrl.algorithms.sac.runner",
    "distrl.algos.iql": "distrl.algorithms.iql.update",
    "distrl.algos.iql_config": "distrl.algorithms.iql.config",
    "distrl.models.iql": "distrl.algorithms.iql.networks",
    "distrl.runners.iql": "distrl.algorithms.iql.runner",
}
"""Old module name -> where it is now (each algorithm became one package, ``distrl.algorithms``)."""


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old name of ``MOVED`` and gives the module under its new one (the same module
    object: its classes are the ones distrl itself uses)."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        print(
            f"distrl: warning: {spec.name} is deprecated; import {MOVED[spec.name]} instead "
            "(the old name goes in the next release)",
            file=sys.stderr,
        )
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was imported under its new name."""


def install() -> None:
    """Let the old names be found (once per process)."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())
