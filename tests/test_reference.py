"""The documentation cannot drift from the code: the generated reference pages equal what the
config models and the argument parser give now, every config key has a description, and the site
builds with MkDocs in strict mode (a broken link or a page missing from the nav fails)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from distrl.reference import PAGES, type_name, undocumented
from tests.helpers import REPO

REFERENCE = REPO / "docs" / "reference"


def test_every_config_key_and_section_has_a_description() -> None:
    assert undocumented() == []


@pytest.mark.parametrize("file_name", sorted(PAGES))
def test_the_generated_reference_page_is_up_to_date(file_name: str) -> None:
    written = (REFERENCE / file_name).read_text()
    assert written == PAGES[file_name]() + "\n", (
        f"docs/reference/{file_name} is out of date: run python -m distrl.reference docs/reference"
    )


def test_types_read_as_values_are_written() -> None:
    from typing import Literal

    from pydantic import PositiveInt

    assert type_name(PositiveInt | None) == "int > 0 | null"
    assert type_name(Literal["a", "b"]) == '"a" | "b"'
    assert type_name(list[PositiveInt]) == "list[int > 0]"


def test_the_site_builds_strictly(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).with_name("mkdocs")
    result = subprocess.run(
        [str(mkdocs), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,  # the benchmarks page includes BENCHMARKS.md by its path from the repository root
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    assert (tmp_path / "site" / "reference" / "configuration" / "index.html").is_file()
    # The benchmarks page holds BENCHMARKS.md's summary table, included at build time.
    assert "Contender" in (tmp_path / "site" / "benchmarks" / "index.html").read_text()


def test_the_readme_links_to_pages_that_exist() -> None:
    import re

    links = re.findall(r"\]\(([^)#]+)\)", (REPO / "README.md").read_text())
    local = [link for link in links if not link.startswith("http")]
    assert len(local) >= 20  # the front door links each feature to its page
    assert [link for link in local if not (REPO / link).exists()] == []
