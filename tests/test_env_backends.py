"""The env backend table: every backend's builder loads, and what the table says of a backend is
what the env layer does (the image check, the install line, the JAX learner's choice)."""

from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

from distrl.algos.registry import JAX, JAX_NATIVE_ENVS
from distrl.config.run import load_config
from distrl.config.run_algorithm import learns_from
from distrl.config.sections import EnvConfig
from distrl.env_backends import ENV_BACKENDS
from distrl.envs import make_vec_env
from distrl.errors import UserError
from distrl.user_code import load
from tests.helpers import CARTPOLE


class TinyImageEnv(gym.Env):
    """Episodes of one step whose observation is a 4x4 RGB frame."""

    observation_space = gym.spaces.Box(0, 255, (4, 4, 3), np.uint8)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        return np.zeros((4, 4, 3), np.uint8), {}

    def step(self, action: int):
        return np.zeros((4, 4, 3), np.uint8), 0.0, True, False, {}


@pytest.mark.parametrize("backend", ENV_BACKENDS.values(), ids=lambda backend: backend.name)
def test_every_backend_builder_loads(backend) -> None:
    backend.require_packages()  # make test installs every extra
    assert callable(load(backend.builder))


def test_the_config_accepts_exactly_the_tables_backends() -> None:
    for name in ENV_BACKENDS:
        assert EnvConfig(id="CartPole-v1", backend=name).backend == name
    names = "'gymnasium', 'gymnasium_async', 'envpool', 'torch', 'gymnax', 'brax' or 'ale'"
    with pytest.raises(ValueError, match=names):
        EnvConfig(id="CartPole-v1", backend="isaac")


def test_images_come_only_from_backends_the_table_says_hand_them_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cfg = EnvConfig(id=f"{__name__}:TinyImageEnv", backend="gymnasium")
    make_vec_env(cfg, [0]).close()
    monkeypatch.setitem(
        ENV_BACKENDS, "gymnasium", dataclasses.replace(ENV_BACKENDS["gymnasium"], images=False)
    )
    others = "image observations come from the gymnasium_async, envpool, ale backends"
    with pytest.raises(UserError, match=f"feature vectors only; {others}"):
        make_vec_env(cfg, [0])


def test_the_jax_learner_steps_jax_native_backends_inside_its_loop() -> None:
    for name, backend in ENV_BACKENDS.items():
        cfg = load_config(CARTPOLE, ["ml_framework=jax", f"env.backend={name}"])
        assert learns_from(cfg) == (JAX_NATIVE_ENVS if backend.jax_native else JAX)
