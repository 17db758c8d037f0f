"""Session-wide fixtures, and a session that stops cleanly (``tests/stopping.py``): SIGTERM or
Ctrl-C ends it within seconds, every process it started ended with it, and each test leaves
the signal handlers as it found them."""

from __future__ import annotations

import os
import shutil
import tempfile
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
    elif "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        # One XLA compile cache for the run: the JAX and Brax runs in its processes (workers,
        # ranks, CLI calls) compile the same programs. A run's own, so no result outlives it.
        cache = tempfile.mkdtemp(prefix="distrl-xla-cache-")
        os.environ["JAX_COMPILATION_CACHE_DIR"] = cache
        # Small programs too (JAX caches only compiles of 1 s or more): a JAX process compiles
        # dozens of small ones, about 2 s of its start-up that a later process need not repeat.
        os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        config.add_cleanup(lambda: shutil.rmtree(cache, ignore_errors=True))
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
    # A Ray instance a test starts itself (Ray's test cluster, a run's local Ray, the chaos
    # soak's), so that two never meet on a port Ray chooses by default. Tests on the session's
    # head need no group: each worker has a head of its own, its address on a port from the
    # worker's range (the fixed ports a second head fails to take, its client server's and
    # dashboard's, serve nothing the tests use).
    "own-ray": (
        "tests/ray/test_workers.py::test_every_way_a_worker_ends_is_named_from_rays_tables",
        "tests/ray/test_launch.py::test_without_an_address_a_local_ray_with_token_auth_runs_the_job",
        "tests/test_chaos_soak.py",
    ),
    # Network namespaces with fixed names and addresses.
    "netns": ("tests/launch/test_multi_host.py",),
    # The demo's fixed port and run directory (runs/demo).
    "demo": ("tests/test_docs_examples.py",),
}
"""Tests that share something of the machine, by what they share: under pytest-xdist
(``--dist loadgroup``) each group runs on one worker, one test at a time. Every other test goes
to whichever worker is free."""


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups into the test ids
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        shared = [name for name, ids in SHARED_MACHINE_STATE.items() if item.nodeid.startswith(ids)]
        if shared:
            item.add_marker(pytest.mark.xdist_group(shared[0]))
