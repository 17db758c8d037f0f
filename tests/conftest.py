"""Session-wide fixtures, and a session that stops cleanly (``tests/stopping.py``): SIGTERM or
Ctrl-C ends it within seconds, every process it started ended with it, and each test leaves
the signal handlers as it found them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.ray_cluster import ray_head, ray_session_head
from tests.reference_runs import reference_run
from tests.stopping import SessionStop, handlers_kept

__all__ = ["ray_head", "ray_session_head", "reference_run"]
pytest_plugins = ["tests.learning_tier"]  # make learn: learning claims over seeds

_STOP = pytest.StashKey[SessionStop]()


def pytest_configure(config: pytest.Config) -> None:
    stop = SessionStop()
    config.add_cleanup(stop.close)  # the very end of the session, whatever ended it
    stop.install()
    config.stash[_STOP] = stop


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """A SIGTERM that the test's own handler took (an in-process training loop's preemption
    handler) still stops the session, after this test."""
    if item.config.stash[_STOP].terminated():
        item.session.shouldstop = "SIGTERM"


@pytest.fixture(autouse=True)
def _signal_handlers_kept() -> Iterator[None]:
    with handlers_kept():
        yield
