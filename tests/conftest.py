"""Session-wide fixtures, and a session that stops cleanly (``tests/stopping.py``): SIGTERM or
Ctrl-C ends it within seconds, every process it started ended with it, and each test leaves
the signal handlers as it found them."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import torch

from tests.ray_cluster import ray_head, ray_session_head
from tests.reference_runs import reference_run
from tests.stopping import SessionStop, handlers_kept

__all__ = ["ray_head", "ray_session_head", "reference_run"]
pytest_plugins = ["tests.learning_tier"]  # make learn: learning claims over seeds

_STOP = pytest.StashKey[SessionStop]()


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):
        # Workers share the cores: a worker's intra-op threads would spin against the others'
        # (a 4 s test took 22 s). Runs in processes of their own get one thread anyway (clean_env).
        torch.set_num_threads(1)
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


SHARED_MACHINE_STATE = {
    # A Ray instance: the session's head, a local Ray of a run's own, the chaos soak's. One at a
    # time: two on one machine contend for Ray's fixed default ports.
    "ray": (
        "tests/ray/",
        "tests/test_chaos_soak.py",
        "tests/test_clean_stop.py",
        "tests/test_docs_examples.py",
    ),
    # Network namespaces with fixed names and addresses.
    "netns": ("tests/launch/test_multi_host.py",),
}
"""Tests that share something of the machine, by what they share: under pytest-xdist
(``--dist loadgroup``) each group runs on one worker, one test at a time."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """An xdist group for each test: what it shares of the machine, or else (but in the learning
    tier, whose seeds run apart) its module, so that a module's fixtures are built once."""
    for item in items:
        path = item.nodeid.split("::")[0]
        shared = [name for name, paths in SHARED_MACHINE_STATE.items() if path.startswith(paths)]
        if not shared and "ray_head" in getattr(item, "fixturenames", ()):
            shared = ["ray"]
        if shared or not config.getoption("--learn"):
            item.add_marker(pytest.mark.xdist_group(shared[0] if shared else path))
