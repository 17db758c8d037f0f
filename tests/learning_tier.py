"""The learning tier: a learning claim holds over seeds, not on one.

A claim is a test marked ``@pytest.mark.learning(seeds=N, kept=S)`` that takes a ``seed`` argument
and asserts what one seed's run must reach. ``make learn`` (``pytest --learn``) runs the claims
alone, each on seeds ``0..N-1``, and prints every claim's pass rate (the solve rate over seeds) at
the end, also written to ``--learn-report`` as JSON. ``make test`` runs a claim on its kept seed
``S`` only, one of the seeds the tier shows passing, so that a regression in learning fails in
minutes; a claim without ``kept`` runs in the tier alone.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

_SEED_ID = re.compile(r"seed\d+-?|-?seed\d+")
_SEED = re.compile(r"[\[-]seed(\d+)[\]-]")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--learn", action="store_true", help="run the learning claims, each over its seeds")
    parser.addoption(
        "--learn-report", default=None, help="with --learn: write each claim's pass rate to this JSON file"
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "learning(seeds, kept=None): a learning claim over seeds 0..seeds-1 (make learn); make test runs "
        "it on seed `kept` alone, or not at all without one",
    )
    if config.getoption("--learn"):
        config.pluginmanager.register(PassRates(config.getoption("--learn-report")), "learning-pass-rates")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("learning")
    if marker is None:
        return
    seeds, kept = marker.kwargs["seeds"], marker.kwargs.get("kept")
    assert "seed" in metafunc.fixturenames, f"{metafunc.function.__name__}: a learning claim takes `seed`"
    assert kept is None or kept < seeds, f"{metafunc.function.__name__}: kept seed {kept} is not a claim seed"
    if metafunc.config.getoption("--learn"):
        chosen = list(range(seeds))
    else:
        chosen = [kept if kept is not None else -1]  # -1: tier-only, deselected below
    metafunc.parametrize("seed", chosen, ids=[f"seed{s}" for s in chosen])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    learn = config.getoption("--learn")

    def selected(item: pytest.Item) -> bool:
        claim = item.get_closest_marker("learning") is not None
        if learn:
            return claim
        return not claim or item.callspec.params["seed"] != -1  # type: ignore[attr-defined]

    kept = [item for item in items if selected(item)]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if not selected(item)])
        items[:] = kept


def claim_name(nodeid: str) -> str:
    """A seed's test id without the seed: the claim it belongs to."""
    return _SEED_ID.sub("", nodeid).replace("[]", "")


class PassRates:
    """Each seed's outcome by its claim, read from the test ids (the reports arrive where the
    hooks run: in pytest-xdist's controller too), printed and written at the end."""

    def __init__(self, report_path: str | None) -> None:
        self.report_path = report_path
        self.outcomes: dict[str, dict[int, str]] = {}
        """claim -> seed -> outcome."""

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        found = _SEED.search(report.nodeid)
        if found is None:
            return
        seed, outcomes = int(found.group(1)), self.outcomes.setdefault(claim_name(report.nodeid), {})
        if report.failed:
            outcomes[seed] = "failed"
        elif report.when == "call" or report.skipped:
            outcomes.setdefault(seed, report.outcome)

    def pytest_terminal_summary(self, terminalreporter) -> None:  # type: ignore[no-untyped-def]
        if not self.outcomes:
            return
        terminalreporter.section("learning claims: pass rate over seeds")
        report = {}
        for claim, by_seed in self.outcomes.items():
            passed = sorted(s for s, outcome in by_seed.items() if outcome == "passed")
            failed = sorted(s for s, outcome in by_seed.items() if outcome != "passed")
            report[claim] = {"passed": len(passed), "run": len(by_seed), "failed_seeds": failed}
            line = f"{len(passed):>3}/{len(by_seed):<3} {claim}"
            terminalreporter.write_line(line + (f"   failed seeds: {failed}" if failed else ""))
        if self.report_path:
            Path(self.report_path).parent.mkdir(parents=True, exist_ok=True)
            Path(self.report_path).write_text(json.dumps(report, indent=1) + "\n")
