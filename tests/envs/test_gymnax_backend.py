"""The gymnax backend against Gymnasium's envs, its same-step auto-reset and time limit, its
seeding, its pure functions under ``jax.jit``, and PPO trained on it end to end.

gymnax computes in float32, Gymnasium in float64. The references start from the same float32
state (gymnax's state copied into Gymnasium's), so the only differences are float32 rounding:
whole CartPole episodes under random actions stayed within 3e-7 of Gymnasium, and one Pendulum
step within a few float32 ulps; ``TOL`` (1e-5, relative and absolute) leaves room on top.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from distrl.config.sections import EnvConfig
from distrl.envs import StepResult, check_env, make_vec_env
from distrl.errors import UserError
from distrl.io import checkpoint as ckpt
from tests.helpers import CARTPOLE as CARTPOLE_PPO
from tests.helpers import distrl

jax = pytest.importorskip("jax")
if importlib.util.find_spec("gymnax") is None:
    pytest.skip("gymnax is not installed", allow_module_level=True)

import jax.numpy as jnp  # noqa: E402

from distrl.envs.gymnax_backend import make_gymnax_vec_env  # noqa: E402
from distrl.envs.jax_envs import JaxVecEnv, env_keys, reset_envs, split_keys, step_envs  # noqa: E402

TOL = 1e-5
NUM_ENVS = 6
CARTPOLE_INIT_BOUND = 0.05
"""gymnax's CartPole draws every initial state component from [-0.05, 0.05], as Gymnasium's does."""


def _gymnax(env_id: str, seeds: list[int] | range, **cfg: object) -> JaxVecEnv:
    return make_gymnax_vec_env(EnvConfig(id=env_id, backend="gymnax", **cfg), list(seeds))


def _balance(obs: torch.Tensor) -> torch.Tensor:
    """A linear CartPole controller that keeps the pole up for well over 500 steps."""
    x, x_dot, theta, theta_dot = obs.unbind(dim=1)
    return (theta + 0.5 * theta_dot + 0.05 * x + 0.2 * x_dot > 0).long()


def _gymnasium_cartpole(state: np.ndarray) -> gym.Env:
    """Gymnasium's CartPole-v1 set to ``state``."""
    env = gym.make("CartPole-v1")
    env.reset(seed=0)
    env.unwrapped.state = state.astype(np.float64)
    return env


@pytest.mark.slow
def test_cartpole_matches_gymnasium_through_termination() -> None:
    vec = _gymnax("CartPole-v1", range(NUM_ENVS))
    env, params = vec.env, vec.env_params
    step = jax.jit(functools.partial(step_envs, env))
    keys, reset_keys = split_keys(env_keys(range(NUM_ENVS)))
    obs, states = reset_envs(env, params, reset_keys)
    references = [_gymnasium_cartpole(np.asarray(o)) for o in obs]
    rng = np.random.default_rng(0)
    running = np.ones(NUM_ENVS, dtype=bool)
    steps = 0
    while running.any():
        actions = rng.integers(2, size=NUM_ENVS)
        keys, step_keys = split_keys(keys)
        obs, states, reward, terminated, truncated, final_obs = step(
            params, step_keys, states, jnp.asarray(actions)
        )
        for i in np.flatnonzero(running):
            ref_obs, ref_reward, ref_terminated, ref_truncated, _ = references[i].step(int(actions[i]))
            np.testing.assert_allclose(np.asarray(final_obs[i]), ref_obs, rtol=TOL, atol=TOL)
            assert float(reward[i]) == ref_reward == 1.0
            assert bool(terminated[i]) == ref_terminated
            assert not truncated[i] and not ref_truncated
            if ref_terminated:
                # The same step already starts the next episode.
                assert np.all(np.abs(np.asarray(obs[i])) <= CARTPOLE_INIT_BOUND)
                assert np.abs(np.asarray(final_obs[i] - obs[i])).max() > CARTPOLE_INIT_BOUND
                running[i] = False
            else:
                np.testing.assert_array_equal(np.asarray(obs[i]), np.asarray(final_obs[i]))
        steps += 1
        assert steps < 500, "random actions should end every episode well before the time limit"


def test_truncation_at_the_time_limit_resets_on_the_same_step() -> None:
    max_episode_steps = 5
    vec = _gymnax("CartPole-v1", [0, 1, 2], max_episode_steps=max_episode_steps)
    obs = vec.reset()
    for step in range(1, 3 * max_episode_steps + 1):
        actions = _balance(obs)
        result = vec.step(actions)
        at_limit = step % max_episode_steps == 0
        assert result.truncated.tolist() == [at_limit] * 3
        assert not result.terminated.any()
        # final_obs is the observation of the state this step led to, before the reset.
        for i in range(3):
            reference = _gymnasium_cartpole(obs[i].numpy())
            ref_obs = reference.step(int(actions[i]))[0]
            np.testing.assert_allclose(result.final_obs[i].numpy(), ref_obs, rtol=TOL, atol=TOL)
        if at_limit:
            assert torch.all(result.obs.abs() <= CARTPOLE_INIT_BOUND)
            assert not torch.equal(result.obs, result.final_obs)
        else:
            assert torch.equal(result.obs, result.final_obs)
        obs = result.obs


def _trajectory(seeds: list[int], actions: np.ndarray) -> torch.Tensor:
    """Observations ``[steps + 1, num_envs, 4]`` of CartPole with a 10-step limit."""
    vec = _gymnax("CartPole-v1", seeds, max_episode_steps=10)
    observations = [vec.reset()]
    observations += [vec.step(torch.as_tensor(a)).obs for a in actions]
    return torch.stack(observations)


def test_env_i_is_seeded_from_seeds_i() -> None:
    actions = np.random.default_rng(0).integers(2, size=(40, 1)).repeat(3, axis=1)
    batch = _trajectory([5, 6, 5], actions)
    assert torch.equal(batch[:, 0], batch[:, 2])  # same seed, same episodes, resets included
    assert not torch.equal(batch[0, 0], batch[0, 1])
    assert not torch.equal(batch[-1, 0], batch[-1, 1])
    # Env 1 runs as a lone env seeded 6 does, and the batch is reproducible.
    assert torch.equal(batch[:, 1], _trajectory([6], actions[:, :1])[:, 0])
    assert torch.equal(batch, _trajectory([5, 6, 5], actions))


@pytest.mark.slow
def test_a_jitted_scan_of_step_envs_matches_the_vec_env() -> None:
    seeds, num_steps = [3, 4, 5, 6], 80
    vec = _gymnax("CartPole-v1", seeds, max_episode_steps=15)
    env = vec.env
    actions = np.random.default_rng(1).integers(2, size=(num_steps, len(seeds)))

    @jax.jit
    def rollout(params: object, keys: jax.Array, actions: jax.Array) -> tuple[jax.Array, tuple]:
        keys, reset_keys = split_keys(keys)
        obs, states = reset_envs(env, params, reset_keys)

        def body(carry: tuple, step_actions: jax.Array) -> tuple[tuple, tuple]:
            keys, states = carry
            keys, step_keys = split_keys(keys)
            obs, states, *flags_and_final = step_envs(env, params, step_keys, states, step_actions)
            return (keys, states), (obs, *flags_and_final)

        return obs, jax.lax.scan(body, (keys, states), actions)[1]

    first_obs, compiled = rollout(vec.env_params, env_keys(seeds), jnp.asarray(actions))
    eager_first_obs = vec.reset()
    eager = [vec.step(torch.as_tensor(a)) for a in actions]
    np.testing.assert_allclose(eager_first_obs.numpy(), np.asarray(first_obs), rtol=1e-6, atol=1e-6)
    # The JAX step gives the five fields every backend has (no lives: life_lost stays None).
    for field, compiled_field in zip(StepResult._fields[:5], compiled, strict=True):
        stacked = torch.stack([getattr(result, field) for result in eager]).numpy()
        np.testing.assert_allclose(stacked, np.asarray(compiled_field), rtol=1e-6, atol=1e-6)
    assert np.asarray(compiled[2]).any() and np.asarray(compiled[3]).any()  # both kinds of ends


@pytest.mark.slow
def test_ppo_trains_on_the_gymnax_backend(tmp_path: Path) -> None:
    overrides = [
        "env.backend=gymnax",
        "train.total_steps=4096",
        "checkpoint.keep_best=false",  # the stop check's best ones aside: no interval was reached
        "log.tensorboard=false",
        "log.progress=false",
    ]
    result = distrl("train", "--config", str(CARTPOLE_PPO), *overrides, "--run-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    checkpoints = ckpt.list_checkpoints(tmp_path / "checkpoints")
    assert [c.name for c in checkpoints] == [ckpt.checkpoint_dir_name(4096)]  # the final one only
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["global_step"] for row in rows] == list(range(512, 4097, 512))  # 32 envs x 16 steps
    # CartPole pays 1 a step: each ended episode's return is its length, and episodes did end.
    assert all(row["episode_return_mean"] == row["episode_length_mean"] for row in rows)
    assert rows[-1]["episodes"] > 0


def test_pendulum_step_matches_gymnasium() -> None:
    # Rows reach both torque limits and the 8 rad/s velocity clip.
    states = np.array([[0.3, -1.0], [3.0, 7.9], [-2.0, -7.95], [1.0, 0.0], [-0.1, 0.5]], np.float32)
    torques = np.array([[0.7], [2.0], [-2.0], [-3.5], [5.0]], np.float32)
    vec = _gymnax("Pendulum-v1", range(len(states)))
    env, params = vec.env, vec.env_params
    _, gymnax_states = reset_envs(env, params, env_keys(range(len(states))))
    gymnax_states = gymnax_states.replace(
        theta=jnp.asarray(states[:, 0]), theta_dot=jnp.asarray(states[:, 1])
    )
    _, _, reward, terminated, truncated, final_obs = jax.jit(functools.partial(step_envs, env))(
        params, env_keys(range(len(states))), gymnax_states, jnp.asarray(torques)
    )
    assert reward.dtype == jnp.float32
    assert not np.asarray(terminated | truncated).any()
    for i, (state, torque) in enumerate(zip(states, torques, strict=True)):
        reference = gym.make("Pendulum-v1")
        reference.reset(seed=0)
        reference.unwrapped.state = state.astype(np.float64)
        ref_obs, ref_reward, *_ = reference.step(torque.astype(np.float64))
        np.testing.assert_allclose(np.asarray(final_obs[i]), ref_obs, rtol=TOL, atol=TOL)
        np.testing.assert_allclose(float(reward[i]), ref_reward, rtol=TOL, atol=TOL)


def test_vec_env_tensors_and_spaces() -> None:
    vec = make_vec_env(EnvConfig(id="Pendulum-v1", backend="gymnax"), [5, 6, 7])
    assert vec.device == torch.device("cpu")
    assert vec.observation_space == gym.spaces.Box(
        np.array([-1, -1, -8]), np.array([1, 1, 8]), dtype=np.float32
    )
    assert vec.action_space == gym.spaces.Box(-2.0, 2.0, (1,), np.float32)
    obs = vec.reset()
    assert obs.dtype == torch.float32 and obs.shape == (3, 3)
    result = vec.step(torch.zeros(3, 1))
    assert result.reward.dtype == torch.float32 and result.reward.shape == (3,)
    assert result.terminated.dtype == result.truncated.dtype == torch.bool
    assert not torch.equal(vec.reset(), obs)  # a second reset continues each env's key chain
    vec.close()
    check_env(EnvConfig(id="Acrobot-v1", backend="gymnax"))
    assert isinstance(_gymnax("MountainCar-v0", [0]).action_space, gym.spaces.Discrete)


def test_kwargs_set_params_or_constructor_arguments() -> None:
    heavy = _gymnax("CartPole-v1", [0], kwargs={"gravity": 30.0}, max_episode_steps=7)
    assert heavy.env_params.gravity == 30.0
    assert heavy.env_params.max_steps_in_episode == 7


@pytest.mark.parametrize(
    ("env_id", "kwargs", "message"),
    [
        ("CartPole-v9", {}, "'CartPole-v9' is not a gymnax env .*gymnax has: CartPole-v1, Pendulum-v1"),
        ("CartPole-v1", {"max_steps_in_episode": 3}, "set the time limit with env.max_episode_steps"),
        ("CartPole-v1", {"colour": "red"}, "unexpected keyword argument 'colour'.*force_mag, gravity"),
        ("Breakout-MinAtar", {}, "observation space .* is not supported"),
    ],
    ids=["unknown-id", "time-limit-kwarg", "unknown-kwarg", "image-observations"],
)
def test_bad_env_is_a_user_error(env_id: str, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UserError, match=message):
        make_vec_env(EnvConfig(id=env_id, backend="gymnax", kwargs=kwargs), [0])


def test_missing_gymnax_is_a_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "gymnax", None)  # makes ``import gymnax`` raise ImportError
    with pytest.raises(UserError, match=r"needs jax and gymnax: pip install 'distrl\[jax\]'"):
        make_vec_env(EnvConfig(id="CartPole-v1", backend="gymnax"), [0])
