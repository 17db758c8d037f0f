"""The EnvPool backend against Gymnasium's envs and distrl's torch envs, step by step, and its
same-step auto-reset.

The two libraries draw different initial states from a seed, so the references are state-matched:
at every new EnvPool episode the reference env is handed EnvPool's first observation as its state
(CartPole's observation is its state; Pendulum's and Acrobot's angles come back via atan2).
EnvPool computes in float64, as Gymnasium and the float64 torch envs do, and rounds only its
outputs to float32, so the reference starts from a state rounded to float32. CartPole runs whole
episodes from there and stays within 5e-7 of EnvPool. Pendulum (unstable at the top) and Acrobot
(chaotic) grow that rounding to about 1e-4 over an episode, so their reference is re-synced to
EnvPool's observation before every step, which makes the check one step of dynamics at a time; one
step stays within 5e-7 (1-2 float32 ulps). ``TOL`` (1e-6, relative and absolute) leaves a few
float32 ulps of room on top of what was measured.

Two differences are EnvPool's own and are asserted as such: an episode that terminates on its
time-limit step comes back truncated only, and EnvPool's Pendulum-v1 advances the angle by the
velocity before clipping it to 8 rad/s (Gymnasium: after).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from distrl.config.sections import EnvConfig
from distrl.envs import make_vec_env
from distrl.envs.envpool_backend import EnvPoolVecEnv, make_envpool_vec_env
from distrl.envs.torch_envs import TorchAcrobot, TorchCartPole, TorchPendulum, TorchVecEnv
from distrl.errors import UserError
from tests.helpers import CARTPOLE as CARTPOLE_PPO
from tests.helpers import distrl

pytest.importorskip("envpool")

TOL = 1e-6
NUM_ENVS = 6
CARTPOLE_INIT_BOUND = 0.05
"""CartPole draws every initial state component from [-0.05, 0.05]."""


def _cartpole_state(obs: np.ndarray) -> np.ndarray:
    return obs.astype(np.float64)


def _pendulum_state(obs: np.ndarray) -> np.ndarray:
    obs = obs.astype(np.float64)
    return np.stack((np.arctan2(obs[:, 1], obs[:, 0]), obs[:, 2]), axis=1)


def _acrobot_state(obs: np.ndarray) -> np.ndarray:
    obs = obs.astype(np.float64)
    return np.stack(
        (np.arctan2(obs[:, 1], obs[:, 0]), np.arctan2(obs[:, 3], obs[:, 2]), obs[:, 4], obs[:, 5]), axis=1
    )


def _discrete_actions(num_actions: int) -> Callable[[np.random.Generator, np.ndarray], np.ndarray]:
    return lambda rng, obs: rng.integers(num_actions, size=len(obs))


def _pendulum_actions(rng: np.random.Generator, obs: np.ndarray) -> np.ndarray:
    """Half the torques push along the spin, so the pendulum reaches its 8 rad/s limit."""
    along_spin = 2.0 * np.where(obs[:, 2:3] >= 0, 1.0, -1.0)
    random = rng.uniform(-2, 2, size=(len(obs), 1))
    return np.where(rng.random((len(obs), 1)) < 0.5, along_spin, random).astype(np.float32)


def _pendulum_envpool_obs(
    states: np.ndarray, actions: np.ndarray, reference_obs: np.ndarray
) -> tuple[np.ndarray, int]:
    """Where the velocity clips, EnvPool 1.2.5 advances the angle by the unclipped velocity."""
    theta, theta_dot = states.T
    torque = np.clip(actions[:, 0].astype(np.float64), -2.0, 2.0)
    unclipped = theta_dot + (3 * 10.0 / 2 * np.sin(theta) + 3.0 * torque) * 0.05
    next_theta = theta + unclipped * 0.05
    envpool_obs = np.stack((np.cos(next_theta), np.sin(next_theta), np.clip(unclipped, -8.0, 8.0)), axis=1)
    clipped = np.abs(unclipped) > 8.0
    return np.where(clipped[:, None], envpool_obs.astype(np.float32), reference_obs), int(clipped.sum())


@dataclass(frozen=True)
class Task:
    env_id: str
    torch_env_class: type[TorchVecEnv]
    state_of: Callable[[np.ndarray], np.ndarray]
    """float64 reference states ``[N, state_dim]`` of EnvPool's float32 observations."""
    actions: Callable[[np.random.Generator, np.ndarray], np.ndarray]
    resync_every_step: bool
    envpool_obs: Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.ndarray, int]] | None = None
    """Where EnvPool's dynamics differ: (states, actions, reference obs) -> (EnvPool's obs, rows)."""


CARTPOLE = Task("CartPole-v1", TorchCartPole, _cartpole_state, _discrete_actions(2), resync_every_step=False)
ACROBOT = Task("Acrobot-v1", TorchAcrobot, _acrobot_state, _discrete_actions(3), resync_every_step=True)
PENDULUM = Task(
    "Pendulum-v1", TorchPendulum, _pendulum_state, _pendulum_actions, True, envpool_obs=_pendulum_envpool_obs
)


class GymnasiumReference:
    """One Gymnasium env per EnvPool env, its state set from EnvPool's."""

    def __init__(self, task: Task, num_envs: int, max_episode_steps: int | None) -> None:
        self.envs = [gym.make(task.env_id, max_episode_steps=max_episode_steps) for _ in range(num_envs)]
        for env in self.envs:
            env.reset(seed=0)

    def set_states(self, rows: np.ndarray, states: np.ndarray, new_episode: np.ndarray) -> None:
        for i in np.flatnonzero(rows):
            if new_episode[i]:
                self.envs[i].reset(seed=0)  # restarts the time limit
            self.envs[i].unwrapped.state = states[i].copy()

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, ...]:
        # A float64 torque keeps Gymnasium's Pendulum in float64 (a float32 one would not).
        steps = [
            env.step(a.astype(np.float64) if a.ndim else a) for env, a in zip(self.envs, actions, strict=True)
        ]
        obs, reward, terminated, truncated, _ = zip(*steps, strict=True)
        return np.stack(obs), np.array(reward), np.array(terminated), np.array(truncated)


class TorchReference:
    """distrl's float64 torch env, its state set from EnvPool's."""

    def __init__(self, task: Task, num_envs: int, max_episode_steps: int | None) -> None:
        self.env = task.torch_env_class(num_envs, dtype=torch.float64, max_episode_steps=max_episode_steps)

    def set_states(self, rows: np.ndarray, states: np.ndarray, new_episode: np.ndarray) -> None:
        state = self.env.state.clone()
        state[torch.from_numpy(rows)] = torch.from_numpy(states[rows])
        episode_steps = self.env.episode_steps.clone()
        episode_steps[torch.from_numpy(new_episode)] = 0
        self.env.set_state(state, episode_steps)

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, ...]:
        result = self.env.step(torch.as_tensor(actions))
        return tuple(
            x.numpy() for x in (result.final_obs, result.reward, result.terminated, result.truncated)
        )


@pytest.mark.parametrize("reference_class", [GymnasiumReference, TorchReference], ids=["gymnasium", "torch"])
@pytest.mark.parametrize(
    ("task", "max_episode_steps", "num_steps", "ends_seen"),
    [
        (CARTPOLE, None, 300, {"terminated"}),
        (CARTPOLE, 20, 100, {"terminated", "truncated"}),
        (ACROBOT, None, 505, {"truncated"}),
        (PENDULUM, None, 420, {"truncated"}),
    ],
    ids=["cartpole", "cartpole-limit-20", "acrobot", "pendulum"],
)
def test_matches_reference_across_episodes(
    task: Task,
    max_episode_steps: int | None,
    num_steps: int,
    ends_seen: set[str],
    reference_class: type[GymnasiumReference | TorchReference],
) -> None:
    rng = np.random.default_rng(0)
    env = EnvPoolVecEnv(task.env_id, range(NUM_ENVS), max_episode_steps)
    reference = reference_class(task, NUM_ENVS, max_episode_steps)
    obs = env.reset().numpy()
    new_episode = np.ones(NUM_ENVS, dtype=bool)
    seen: set[str] = set()
    envpool_deviations = 0
    for _ in range(num_steps):
        states = task.state_of(obs)
        reference.set_states(new_episode | task.resync_every_step, states, new_episode)
        actions = task.actions(rng, obs)
        result = env.step(torch.as_tensor(actions))
        ref_obs, ref_reward, ref_terminated, ref_truncated = reference.step(actions)
        if task.envpool_obs is not None:
            ref_obs, deviations = task.envpool_obs(states, actions, ref_obs)
            envpool_deviations += deviations

        np.testing.assert_allclose(result.final_obs.numpy(), ref_obs, rtol=TOL, atol=TOL)
        np.testing.assert_allclose(result.reward.numpy(), ref_reward, rtol=TOL, atol=TOL)
        # EnvPool reports a termination on the time-limit step as a truncation only.
        np.testing.assert_array_equal(result.terminated.numpy(), ref_terminated & ~ref_truncated)
        np.testing.assert_array_equal(result.truncated.numpy(), ref_truncated)
        new_episode = (result.terminated | result.truncated).numpy()
        np.testing.assert_array_equal(
            result.obs.numpy()[~new_episode], result.final_obs.numpy()[~new_episode]
        )
        seen |= {"terminated"} if result.terminated.any() else set()
        seen |= {"truncated"} if result.truncated.any() else set()
        obs = result.obs.numpy()
    assert seen == ends_seen
    if task.envpool_obs is not None:
        assert envpool_deviations > 0, "the run never reached the steps where EnvPool differs"


def _balance(obs: torch.Tensor) -> torch.Tensor:
    """A linear CartPole controller that keeps the pole up for well over 500 steps."""
    x, x_dot, theta, theta_dot = obs.unbind(dim=1)
    return (theta + 0.5 * theta_dot + 0.05 * x + 0.2 * x_dot > 0).long()


@pytest.mark.parametrize(("max_episode_steps", "episode_length"), [(None, 500), (20, 20)])
def test_auto_reset_on_the_same_step_and_exact_time_limit(
    max_episode_steps: int | None, episode_length: int
) -> None:
    env = EnvPoolVecEnv("CartPole-v1", range(4), max_episode_steps)
    obs = env.reset()
    steps_in_episode = torch.zeros(4, dtype=torch.int64)
    just_reset = torch.zeros(4, dtype=torch.bool)
    ends = 0
    for _ in range(2 * episode_length + 1):
        actions = _balance(obs)
        result = env.step(actions)
        steps_in_episode += 1
        # The step after a reset applies its action: the force of 10 N moves the cart's velocity
        # by about 0.18 its way (EnvPool's own deferred reset would ignore it and reset again).
        x_dot_change = result.final_obs[:, 1] - obs[:, 1]
        assert torch.all(x_dot_change[just_reset].abs() > 0.15)
        assert torch.all(x_dot_change[just_reset].sign() == 2 * actions[just_reset] - 1)
        done = result.terminated | result.truncated
        assert not result.terminated.any()
        assert torch.equal(result.truncated, steps_in_episode == episode_length)
        assert torch.equal(result.obs[~done], result.final_obs[~done])
        assert torch.all(result.obs[done].abs() <= CARTPOLE_INIT_BOUND)
        assert torch.all((result.final_obs[done] - result.obs[done]).abs().amax(dim=1) > CARTPOLE_INIT_BOUND)
        steps_in_episode[done] = 0
        just_reset = done
        ends += int(done.sum())
        obs = result.obs
    assert ends == 2 * 4


def test_termination_on_the_time_limit_step_comes_back_truncated_only() -> None:
    """EnvPool computes ``terminated = done & ~truncated`` (Gymnasium reports both)."""
    always_right = torch.ones(1, dtype=torch.int64)
    env = EnvPoolVecEnv("CartPole-v1", [3], None)
    env.reset()
    episode_length = 1
    while not env.step(always_right).terminated.item():
        episode_length += 1
    env = EnvPoolVecEnv("CartPole-v1", [3], episode_length)
    env.reset()
    for _ in range(episode_length):
        result = env.step(always_right)
    assert result.truncated.item()
    assert not result.terminated.item()


def test_tensors_and_seeds() -> None:
    env = EnvPoolVecEnv("Pendulum-v1", [5, 6, 7], None)
    obs = env.reset()
    assert env.device == torch.device("cpu")
    assert env.observation_space.shape == (3,)
    assert isinstance(env.action_space, gym.spaces.Box)
    assert obs.dtype == torch.float32
    assert obs.shape == (3, 3)
    result = env.step(torch.zeros(3, 1))
    assert result.reward.dtype == torch.float32
    assert result.reward.shape == (3,)
    assert result.terminated.dtype == result.truncated.dtype == torch.bool
    # Env i is seeded seeds[i]: the second env starts as a lone env seeded 6 does.
    assert torch.equal(obs[1], EnvPoolVecEnv("Pendulum-v1", [6], None).reset()[0])
    # A second reset continues each env's random stream.
    assert not torch.equal(env.reset(), obs)
    env.close()


def test_builder_passes_the_env_config() -> None:
    cfg = EnvConfig(id="CartPole-v1", backend="envpool", max_episode_steps=3, kwargs={"num_threads": 1})
    env = make_envpool_vec_env(cfg, [0, 1], torch.device("cpu"))
    env.reset()
    truncated = [env.step(torch.ones(2, dtype=torch.int64)).truncated for _ in range(3)]
    assert torch.equal(torch.stack(truncated)[:, 0], torch.tensor([False, False, True]))


@pytest.mark.parametrize(
    ("env_id", "kwargs", "message"),
    [
        ("CartPole-v9", {}, "'CartPole-v9' is not an EnvPool env"),
        ("CartPole-v1", {"gravity": 3.0}, "env.kwargs gravity: not EnvPool options of 'CartPole-v1'"),
        ("CartPole-v1", {"seed": 3}, "allowed: base_path, max_num_players, num_threads"),
    ],
    ids=["unknown-id", "unknown-option", "reserved-option"],
)
def test_bad_env_is_a_user_error(env_id: str, kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(UserError, match=message):
        EnvPoolVecEnv(env_id, [0], None, **kwargs)


def test_missing_envpool_is_a_user_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "envpool", None)  # as if EnvPool were not installed
    line = r"^env.backend=envpool needs envpool: pip install 'distrl\[envpool\]'$"
    with pytest.raises(UserError, match=line):
        make_vec_env(EnvConfig(id="CartPole-v1", backend="envpool"), [0])


@pytest.mark.slow
@pytest.mark.learning(seeds=3)
def test_ppo_solves_cartpole_on_the_envpool_backend(tmp_path: Path, seed: int) -> None:
    args = ["--config", str(CARTPOLE_PPO), "env.backend=envpool", "--total-steps", "300000"]
    args += ["--seed", str(seed)]
    result = distrl("train", *args, "log.tensorboard=false", "--run-dir", str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(distrl("eval", "--checkpoint", str(tmp_path), "--json").stdout)
    assert report["return_mean"] >= 475
