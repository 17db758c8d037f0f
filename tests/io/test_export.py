"""An exported policy file gives the same actions as distrl's own policy on a batch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import torch

from distrl.eval.policy import load_policy
from distrl.models.memory import policy_state_size
from tests.helpers import CARTPOLE, CARTPOLE_DQN, CARTPOLE_MEMORY, REPO, distrl

PENDULUM = REPO / "configs" / "pendulum_ppo.yaml"
SHORT = ["--total-steps", "1024", "train.stop_return=null", "log.tensorboard=false"]
CASES = {
    "ppo-discrete": (CARTPOLE, []),
    # Normalised observations and clipped actions: both must travel inside the file.
    "ppo-continuous": (PENDULUM, ["env.num_envs=2", "algo.rollout_steps=256"]),
    "dqn": (CARTPOLE_DQN, ["algo.learning_starts=256", "algo.gradient_steps=4"]),
    # The memory state is an input and an output of the file.
    "ppo-lstm": (CARTPOLE_MEMORY, ["algo.update_epochs=2"]),
}


@pytest.fixture(scope="module", params=list(CASES))
def trained(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Path:
    config, overrides = CASES[request.param]
    run_dir = tmp_path_factory.mktemp(request.param)
    result = distrl("train", "--config", str(config), "--run-dir", str(run_dir), *SHORT, *overrides)
    assert result.returncode == 0, result.stderr
    return run_dir


def observations(obs_dim: int) -> torch.Tensor:
    # Wide enough that a continuous policy's mean leaves the action bounds for some rows.
    return torch.randn(64, obs_dim, generator=torch.Generator().manual_seed(0)) * 5


def file_outputs(file: Path) -> Callable[..., list[np.ndarray]]:
    """The exported ``file`` as a function: tensors in (observations, then the state where it has
    memory), its outputs out as arrays."""
    if file.suffix == ".onnx":
        session = onnxruntime.InferenceSession(str(file))
        names = [i.name for i in session.get_inputs()]
        return lambda *inputs: session.run(None, {n: x.numpy() for n, x in zip(names, inputs, strict=True)})
    module = torch.jit.load(str(file))

    def run(*inputs: torch.Tensor) -> list[np.ndarray]:
        out = module(*inputs)
        return [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]

    return run


def assert_file_acts_like_checkpoint(file: Path, run_dir: Path) -> None:
    """The exported ``file`` (TorchScript or ``.onnx``) gives the actions of ``run_dir``'s final
    checkpoint as distrl rebuilds it, dtype and shape included."""
    loaded = load_policy(run_dir)
    obs = observations(loaded.observation_space.shape[0])
    run = file_outputs(file)
    if not policy_state_size(loaded.policy):
        with torch.no_grad():
            expected = loaded.policy(obs).numpy()
        (actions,) = run(obs)
        assert actions.shape == expected.shape and actions.dtype == expected.dtype
        np.testing.assert_allclose(actions, expected, rtol=1e-5, atol=1e-5)
        return
    # With memory: three steps, each from the states the file gave at the one before.
    state = expected_state = torch.zeros(len(obs), policy_state_size(loaded.policy))
    for _ in range(3):
        with torch.no_grad():
            expected, expected_state = loaded.policy(obs, expected_state)
        actions, next_state = run(obs, state)
        state = torch.from_numpy(next_state)
        assert actions.shape == expected.shape and actions.dtype == expected.numpy().dtype
        np.testing.assert_allclose(actions, expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(next_state, expected_state, rtol=1e-5, atol=1e-5)
    assert expected_state.abs().max() > 0


@pytest.mark.parametrize("fmt", ["torchscript", "onnx"])
@pytest.mark.slow
def test_exported_file_acts_like_distrl(trained: Path, tmp_path: Path, fmt: str) -> None:
    out = tmp_path / f"policy.{'pt' if fmt == 'torchscript' else 'onnx'}"
    result = distrl("export", "--checkpoint", str(trained), "--format", fmt, "--out", str(out))
    assert result.returncode == 0, result.stderr
    # distrl's one line, not the exporter's progress lines and warnings (--verbose shows them).
    assert result.stdout.startswith("distrl: exported the ")
    assert len(result.stdout.splitlines()) == 1 and not result.stderr, (result.stdout, result.stderr)
    assert_file_acts_like_checkpoint(out, trained)
    if fmt == "onnx":
        args = ("--checkpoint", str(trained), "--format", fmt, "--out", str(out))
        shown = distrl("export", *args, "--verbose")
        assert shown.returncode == 0 and "[torch.onnx]" in shown.stdout, shown.stdout


@pytest.mark.slow
def test_export_to_an_unwritable_place_is_one_line(trained: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = distrl(
        "export", "--checkpoint", str(trained), "--format", "torchscript", "--out", str(blocker / "x")
    )
    assert result.returncode == 2 and result.stderr.startswith("distrl: error: --out")
    assert len(result.stderr.strip().splitlines()) == 1


def test_output_path_names_an_unwritable_place_before_training(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = distrl(
        "train", "--config", str(CARTPOLE), "--run-dir", str(tmp_path / "run"), *SHORT,
        f"output.path={blocker / 'policy.pt'}",
    )  # fmt: skip
    assert result.returncode == 2 and result.stderr.startswith("distrl: error: output.path")
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "run" / "checkpoints").exists()
