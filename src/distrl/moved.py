"""Modules and names that moved, importable by their old names for one release: a plug-in that
imports ``distrl.algos.sac`` (or names ``distrl.collect.sac:actor_copies`` in its ``Algorithm``)
gets the module at its new place, and one that imports ``make_q_network`` from
``distrl.models.policies`` gets DQN's; either way one line on stderr says where it is now."""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
from types import ModuleType
from typing import Any

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
    "distrl.algos.dqn": "distrl.algorithms.dqn.update",
    "distrl.algos.dqn_config": "distrl.algorithms.dqn.config",
    "distrl.runners.off_policy": "distrl.algorithms.dqn.runner",
    "distrl.runners.offline": "distrl.algorithms.dqn.offline_runner",
}
"""Old module name -> where it is now (each algorithm became one package, ``distrl.algorithms``)."""

MOVED_NAMES = {
    "distrl.models.policies": dict.fromkeys(
        ("make_q_network", "greedy_policy", "q_policy"), "distrl.algorithms.dqn.networks"
    ),
    "distrl.collect.transitions": dict.fromkeys(
        ("EpsilonGreedy", "epsilon_greedy_collector", "q_network_copies"), "distrl.algorithms.dqn.acting"
    ),
}
"""Old module -> {name that left it -> the module it is in now}: each old module's
``__getattr__`` is ``moved_name``."""


def _said(old: str, new: str) -> None:
    later = "the old name goes in the next release"
    print(f"distrl: warning: {old} is deprecated; import {new} instead ({later})", file=sys.stderr)


def moved_name(module: str, name: str) -> Any:
    """``name`` of ``module`` where it is now, said in one line (a module's ``__getattr__``,
    asked only for names the module itself lacks)."""
    new = MOVED_NAMES.get(module, {}).get(name)
    if new is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    _said(f"{module}.{name}", f"{new}.{name}")
    return getattr(importlib.import_module(new), name)


class MovedModules:
    """Finds an old name of ``MOVED`` and gives the module under its new one (the same module
    object: its classes are the ones distrl itself uses). A meta path finder and its loader by
    their methods, not by ``importlib.abc``'s bases: importing that costs every distrl process
    about 17 ms."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        _said(spec.name, MOVED[spec.name])
        return importlib.import_module(MOVED[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module was imported under its new name."""


def install() -> None:
    """Let the old names be found (once per process)."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())
