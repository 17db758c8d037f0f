"""One mapping from a reported failure to the exit status every entry point returns."""

from __future__ import annotations

import pickle

import pytest

from distrl.errors import REPORTED, CollectiveMismatch, PeerFailure, UserError, exit_status
from distrl.launch.jax import main as jax_launcher


@pytest.mark.parametrize(
    ("failure", "status"),
    [(UserError("x", code="test-x"), 2), (PeerFailure("x"), 3), (CollectiveMismatch("x"), 3)],
)
def test_each_reported_failure_has_its_exit_status(failure: Exception, status: int) -> None:
    assert isinstance(failure, REPORTED)
    assert exit_status(failure) == status


def test_the_jax_launcher_reports_bad_flags_with_the_shared_status(capsys: pytest.CaptureFixture) -> None:
    assert jax_launcher(["--nnodes", "0", "-m", "distrl.train"]) == 2
    assert capsys.readouterr().err.strip() == "distrl.launch.jax: error: --nnodes 0: must be at least 1"


def test_a_user_error_keeps_its_message_and_id_through_pickling() -> None:
    """Ray and multiprocessing send a worker's UserError to the process that reports it."""
    error = UserError("env.num_envs=0: must be at least 1", code="config-value-invalid")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is UserError
    assert str(again) == again.args[0] == "env.num_envs=0: must be at least 1"
    assert again.code == "config-value-invalid"


def test_a_plug_ins_own_user_error_needs_no_id() -> None:
    """distrl's own refusals all carry one (``tests/test_troubleshooting_ids.py``); a plug-in's
    ``raise UserError("...")`` is still its one line."""
    error = pickle.loads(pickle.dumps(UserError("robot.yaml: no arm named 'left'")))
    assert str(error) == "robot.yaml: no arm named 'left'" and error.code is None


def test_a_user_error_rebuilt_from_another_keeps_both() -> None:
    """gymnasium's AsyncVectorEnv re-raises an env process's error as ``type(error)(error)``."""
    error = UserError("its observation is shape (3,)", code="env-observation-misfit")
    again = UserError(error)
    assert str(again) == again.args[0] == "its observation is shape (3,)"
    assert again.code == "env-observation-misfit"
