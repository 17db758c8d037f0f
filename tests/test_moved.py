"""Modules and names that moved into an algorithm's package still import by their old names for
one release: the same objects (distrl's own), one line on stderr naming where each is now."""

from __future__ import annotations

import json

from distrl.moved import MOVED, MOVED_NAMES
from tests.helpers import run_python

IMPORT_OLD_NAMES = """
import importlib, json
from distrl.moved import MOVED, MOVED_NAMES
same = {old: importlib.import_module(old) is importlib.import_module(new) for old, new in MOVED.items()}
for module, names in MOVED_NAMES.items():
    for name, new in names.items():
        old = getattr(importlib.import_module(module), name)
        same[f"{module}.{name}"] = old is getattr(importlib.import_module(new), name)
from distrl.user_code import load
same["plug-in reference"] = load("distrl.collect.sac:actor_copies", "acting").__module__
print(json.dumps(same))
"""

LATER = "the old name goes in the next release"


def test_every_old_name_imports_what_moved_and_says_where_it_is() -> None:
    done = run_python("-c", IMPORT_OLD_NAMES)
    assert done.returncode == 0, done.stderr[-3000:]
    same = json.loads(done.stdout)
    assert same.pop("plug-in reference") == "distrl.algorithms.sac.acting"
    names = {
        f"{module}.{name}": f"{new}.{name}"
        for module, moved in MOVED_NAMES.items()
        for name, new in moved.items()
    }
    assert same == dict.fromkeys([*MOVED, *names], True)
    assert done.stderr.strip().splitlines() == [
        f"distrl: warning: {old} is deprecated; import {new} instead ({LATER})"
        for old, new in {**MOVED, **names}.items()
    ]


def test_a_name_that_never_was_is_still_an_attribute_error() -> None:
    import distrl.models.policies

    try:
        distrl.models.policies.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no attribute 'no_such_name'" in str(exc)
    else:
        raise AssertionError("an unknown name was found")
