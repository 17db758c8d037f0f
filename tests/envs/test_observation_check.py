"""A user's env whose observations break its declared space mid-run: one line naming the env,
its index and the step, in one process or with each env in a process of its own, and a run that
meets one ends with exit code 2 and its newest checkpoint intact."""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from distrl.config.sections import EnvConfig
from distrl.envs import make_vec_env
from distrl.envs.observation_check import misfit
from distrl.errors import UserError
from distrl.io import checkpoint as ckpt
from tests.helpers import CARTPOLE, distrl

BROKEN = {
    "shape": r"its observation is shape \(3,\), not the \(2,\) of its space",
    "dtype": "its observation is dtype <U1, which does not cast to its space's float32",
    "key": "its observation is a dict missing the key\\(s\\) 'bias' its space declares",
}


@pytest.mark.parametrize("backend", ["gymnasium", "gymnasium_async"])
@pytest.mark.parametrize("fault", sorted(BROKEN))
def test_an_observation_that_breaks_its_space_is_one_line_at_its_step(fault: str, backend: str) -> None:
    cfg = EnvConfig(
        id="tests.envs.toy:DriftingObservationEnv", kwargs={"fault": fault, "bad_step": 5}, backend=backend
    )
    env = make_vec_env(cfg, [0, 1])
    try:
        env.reset()
        for _ in range(4):
            env.step(torch.zeros(2, dtype=torch.int64))
        with pytest.raises(
            UserError, match=rf"DriftingObservationEnv' \(env \d of 2 here\) at step 5: {BROKEN[fault]}"
        ):
            env.step(torch.zeros(2, dtype=torch.int64))
    finally:
        env.close()


def test_what_fits_a_space_and_what_does_not() -> None:
    box = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
    assert misfit(box, np.array([5.0, -1.0])) is None  # float64 out of bounds: values are not checked
    assert misfit(box, [0, 1]) is None  # integers cast to float32
    assert misfit(gym.spaces.Box(0, 255, (2,), np.uint8), np.zeros(2, np.float32)) is not None
    spaces = gym.spaces.Dict({"a": box})
    assert misfit(spaces, np.zeros(2)) == "a ndarray, not the dict its space declares"
    assert misfit(spaces, {"a": np.zeros(3)}) == "key 'a': shape (3,), not the (2,) of its space"


def test_a_run_whose_env_breaks_its_space_stops_in_one_line_and_keeps_its_checkpoint(tmp_path: Path) -> None:
    result = distrl(
        "train", "--config", str(CARTPOLE), "--run-dir", str(tmp_path), "log.progress=false",
        "--env", "tests.envs.toy:DriftingObservationEnv", "env.kwargs={fault: shape, bad_step: 100}",
        "env.num_envs=4", "algo.rollout_steps=16", "algo.minibatch_size=32", "train.stop_return=null",
        "checkpoint.interval_steps=64", "train.total_steps=4096",
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    (line,) = [line for line in result.stderr.splitlines() if line.startswith("distrl: error:")]
    assert "at step 100: its observation is shape (3,)" in line
    # 6 updates of 16 steps ran before step 100; the newest checkpoint is the last one's, whole.
    newest = ckpt.list_checkpoints(tmp_path / "checkpoints")[-1]
    assert newest.name == ckpt.checkpoint_dir_name(6 * 64)
    assert "model.safetensors" in ckpt.load_checkpoint(newest)
