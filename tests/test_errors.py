"""One mapping from a reported failure to the exit status every entry point returns."""

from __future__ import annotations

import pytest

from distrl.errors import REPORTED, CollectiveMismatch, PeerFailure, UserError, exit_status
from distrl.launch.jax import main as jax_launcher


@pytest.mark.parametrize(
    ("failure", "status"), [(UserError("x"), 2), (PeerFailure("x"), 3), (CollectiveMismatch("x"), 3)]
)
def test_each_reported_failure_has_its_exit_status(failure: Exception, status: int) -> None:
    assert isinstance(failure, REPORTED)
    assert exit_status(failure) == status


def test_the_jax_launcher_reports_bad_flags_with_the_shared_status(capsys: pytest.CaptureFixture) -> None:
    assert jax_launcher(["--nnodes", "0", "-m", "distrl.train"]) == 2
    assert capsys.readouterr().err.strip() == "distrl.launch.jax: error: --nnodes 0: must be at least 1"
