"""A module that moved into an algorithm's package still imports by its old name for one
release: the same module object (its classes are distrl's own), one line on stderr naming where
it is now."""

from __future__ import annotations

import json

from distrl.moved import MOVED
from tests.helpers import run_python

IMPORT_OLD_NAMES = """
import importlib, json, sys
from distrl.moved import MOVED
same = {old: importlib.import_module(old) is importlib.import_module(new) for old, new in MOVED.items()}
from distrl.user_code import load
same["plug-in reference"] = load("distrl.collect.sac:actor_copies", "acting").__module__
print(json.dumps(same))
"""


def test_every_old_name_imports_the_moved_module_and_says_where_it_is() -> None:
    done = run_python("-c", IMPORT_OLD_NAMES)
    assert done.returncode == 0, done.stderr[-3000:]
    same = json.loads(done.stdout)
    assert same.pop("plug-in reference") == "distrl.algorithms.sac.acting"
    assert same == dict.fromkeys(MOVED, True)
    lines = done.stderr.strip().splitlines()
    assert lines == [
        f"distrl: warning: {old} is deprecated; import {new} instead (the old name goes in the next release)"
        for old, new in MOVED.items()
    ]
