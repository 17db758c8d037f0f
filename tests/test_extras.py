"""An optional extra's install line only when one of its own packages is missing: a package that
is installed but fails to import keeps its own error."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from distrl.errors import UserError
from distrl.extras import require_extra


def test_a_missing_package_names_the_extra() -> None:
    with pytest.raises(UserError, match=r"^env.backend=x needs X: pip install 'distrl\[x\]'$"):
        require_extra("x", ("json", "no_such_package_for_distrl"), "env.backend=x needs X")


def test_an_installed_package_that_fails_to_import_keeps_its_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "broken_for_distrl").mkdir()
    (tmp_path / "broken_for_distrl" / "__init__.py").write_text("raise ImportError('flax is too old')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    require_extra("x", ("broken_for_distrl",), "needs it")  # installed: no install line
    with pytest.raises(ImportError, match="flax is too old"):
        import broken_for_distrl  # noqa: F401
    sys.modules.pop("broken_for_distrl", None)
