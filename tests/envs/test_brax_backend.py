"""The Brax backend: its time limit and termination with distrl's same-step reset, its seeding,
its spaces, and PPO trained on it fully compiled (``ml_framework: jax``), then evaluated."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from distrl.config.sections import EnvConfig
from distrl.envs import make_vec_env
from distrl.errors import UserError
from tests.eval.reference import reference_returns
from tests.helpers import distrl

pytest.importorskip("jax")
if importlib.util.find_spec("brax") is None:
    pytest.skip("brax is not installed", allow_module_level=True)

PENDULUM = "inverted_pendulum"
INIT_NOISE = 0.01
"""Brax's inverted pendulum starts every joint position and velocity within 0.01 of rest."""


EVAL_EPISODES = 2
"""Every VecEnv here has this many envs, as the trained policy's ``distrl eval`` below has: one
batch size, so Brax's reset and step compile once for the file (seconds each), not once per size."""


def _pendulum(seeds: list[int], **cfg: object):
    assert len(seeds) == EVAL_EPISODES
    return make_vec_env(EnvConfig(id=PENDULUM, backend="brax", **cfg), seeds)


@pytest.mark.slow
def test_time_limit_truncates_and_resets_on_the_same_step() -> None:
    vec = _pendulum([0, 1], max_episode_steps=4)
    assert vec.observation_space == gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    assert vec.action_space == gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    vec.reset()
    for step in range(1, 9):
        result = vec.step(torch.zeros(2, 1))
        at_limit = step % 4 == 0
        assert result.truncated.tolist() == [at_limit] * 2
        assert not result.terminated.any()
        assert result.reward.dtype == torch.float32 and result.obs.dtype == torch.float32
        if at_limit:
            assert not torch.equal(result.obs, result.final_obs)
            assert result.obs.abs().max() <= INIT_NOISE  # the next episode's first observation
        else:
            assert torch.equal(result.obs, result.final_obs)


@pytest.mark.slow
def test_a_fallen_pendulum_terminates_and_restarts_upright() -> None:
    vec = _pendulum([3, 4])
    vec.reset()
    for _ in range(200):  # pushing the cart one way topples the pole within a few dozen steps
        result = vec.step(torch.ones(2, 1))
        if result.terminated.all():
            break
    assert result.terminated.all() and not result.truncated.any()
    assert result.final_obs[:, 1].abs().min() > 0.2  # Brax ends the episode past 0.2 rad
    assert result.obs.abs().max() <= INIT_NOISE


@pytest.mark.slow
def test_env_i_is_seeded_from_seeds_i() -> None:
    first = _pendulum([5, 6]).reset()
    assert not torch.equal(first[0], first[1])
    # The same seeds at swapped places: each env's episode follows its seed, not its place.
    swapped = _pendulum([6, 5]).reset()
    assert torch.equal(swapped[0], first[1]) and torch.equal(swapped[1], first[0])


@pytest.mark.parametrize(
    ("env_id", "kwargs", "message"),
    [
        ("pendulum", {}, "'pendulum' is not a Brax env .*Brax has: ant, .*inverted_pendulum"),
        (PENDULUM, {"backend": "wobbly"}, "'inverted_pendulum' .* could not be created from env.kwargs"),
    ],
    ids=["unknown-id", "bad-kwarg"],
)
def test_bad_env_is_a_user_error(env_id: str, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UserError, match=message):
        make_vec_env(EnvConfig(id=env_id, backend="brax", kwargs=kwargs), [0])


@pytest.mark.slow
def test_compiled_ppo_trains_on_brax_and_its_checkpoint_evaluates(tmp_path: Path) -> None:
    run = [
        "--ml-framework", "jax", "env.backend=brax", f"env.id={PENDULUM}", "env.num_envs=16",
        "env.max_episode_steps=100", "algo.rollout_steps=16", "train.total_steps=1024",
        "train.stop_return=null", "log.tensorboard=false", "log.progress=false",
    ]  # fmt: skip
    result = distrl("train", *run, "--run-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert not result.stderr, result.stderr  # Brax's and jaxopt's warnings about themselves: silenced
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["global_step"] for row in rows] == [256, 512, 768, 1024]  # 16 envs x 16 steps
    assert rows[-1]["episodes"] > 0 and np.isfinite(rows[-1]["value_loss"])
    # A reward of 1 per upright step: each ended episode's return is its length.
    assert all(row["episode_return_mean"] == row["episode_length_mean"] for row in rows)
    evaluated = distrl("eval", "--checkpoint", str(tmp_path), "--episodes", str(EVAL_EPISODES), "--json")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    report = json.loads(evaluated.stdout)
    assert 0 < report["return_mean"] <= 100  # a reward of 1 per upright step
    # The final checkpoint's policy, its episodes played again apart from `distrl eval`.
    assert report["global_step"] == 1024 and report["returns"] == reference_returns(tmp_path, EVAL_EPISODES)
