"""The torch classic-control envs against Gymnasium's own envs, step by step.

Both sides run in float64 (Gymnasium integrates in Python floats), so the states agree to rounding:
only last-bit differences between numpy's and torch's sin/cos, which chaotic Acrobot grows to about
3e-13 in 500 steps (hence ``STATE_ATOL``); the float32 observations came out identical.
After an auto-reset the Gymnasium env is reset too (clearing its time limit) and handed the torch
env's new initial state, so whole runs across many episodes are compared, not only first episodes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import pytest
import torch

from distrl.envs.torch_envs import TorchAcrobot, TorchCartPole, TorchPendulum, TorchVecEnv

STATE_ATOL = 1e-9
OBS_ATOL = 1e-5
REWARD_ATOL = 1e-5
NUM_ENVS = 8


@dataclass(frozen=True)
class Task:
    env_id: str
    env_cls: type[TorchVecEnv]
    gym_observation: Callable[[gym.Env], np.ndarray]
    """Observation of a Gymnasium env's (unwrapped) current state."""
    wide_state_bound: tuple[float, ...]
    """States drawn from [-bound, bound] reach terminations, angle wrapping and velocity limits."""


CARTPOLE = Task(
    "CartPole-v1", TorchCartPole, lambda env: np.asarray(env.state, np.float32), (2.5, 3, 0.25, 3)
)
ACROBOT = Task("Acrobot-v1", TorchAcrobot, lambda env: env._get_ob(), (np.pi, np.pi, 4 * np.pi, 9 * np.pi))
PENDULUM = Task("Pendulum-v1", TorchPendulum, lambda env: env._get_obs(), (3 * np.pi, 8))


def _random_actions(env: TorchVecEnv, rng: np.random.Generator) -> np.ndarray:
    if isinstance(env.action_space, gym.spaces.Discrete):
        return rng.integers(env.action_space.n, size=env.num_envs)
    # Torques beyond [-2, 2] check the clipping; float64 so that Gymnasium computes in float64
    # (numpy would keep a float32 torque's products in float32).
    return rng.uniform(-3, 3, size=(env.num_envs, 1))


def _make_gym_envs(task: Task, torch_env: TorchVecEnv, max_episode_steps: int | None) -> list[gym.Env]:
    gym_envs = [gym.make(task.env_id, max_episode_steps=max_episode_steps) for _ in range(torch_env.num_envs)]
    for i, gym_env in enumerate(gym_envs):
        _sync(gym_env, torch_env, i)
    return gym_envs


def _sync(gym_env: gym.Env, torch_env: TorchVecEnv, i: int) -> None:
    """Start a new Gymnasium episode (resetting its time limit) from torch env i's state."""
    gym_env.reset(seed=i)
    gym_env.unwrapped.state = torch_env.state[i].numpy().copy()


@pytest.mark.parametrize(
    ("task", "max_episode_steps", "num_steps", "ends_seen"),
    [
        (CARTPOLE, None, 300, {"terminated"}),
        (CARTPOLE, 20, 100, {"terminated", "truncated"}),
        (ACROBOT, None, 520, {"truncated"}),
        (PENDULUM, None, 300, {"truncated"}),
    ],
    ids=["cartpole", "cartpole-limit-20", "acrobot", "pendulum"],
)
@pytest.mark.slow
def test_matches_gymnasium_across_auto_resets(
    task: Task, max_episode_steps: int | None, num_steps: int, ends_seen: set[str]
) -> None:
    torch_env = task.env_cls(NUM_ENVS, seed=3, dtype=torch.float64, max_episode_steps=max_episode_steps)
    obs = torch_env.reset()
    gym_envs = _make_gym_envs(task, torch_env, max_episode_steps)
    np.testing.assert_allclose(obs, [task.gym_observation(e.unwrapped) for e in gym_envs], atol=OBS_ATOL)
    rng = np.random.default_rng(0)
    seen = {"terminated": 0, "truncated": 0}
    for _ in range(num_steps):
        actions = _random_actions(torch_env, rng)
        result = torch_env.step(torch.as_tensor(actions))
        for i, gym_env in enumerate(gym_envs):
            gym_obs, gym_reward, gym_terminated, gym_truncated, _ = gym_env.step(actions[i])
            np.testing.assert_allclose(result.final_obs[i], gym_obs, atol=OBS_ATOL)
            assert result.reward[i].item() == pytest.approx(gym_reward, abs=REWARD_ATOL)
            assert (result.terminated[i].item(), result.truncated[i].item()) == (
                gym_terminated,
                gym_truncated,
            )
            if gym_terminated or gym_truncated:
                _sync(gym_env, torch_env, i)
                np.testing.assert_allclose(
                    result.obs[i], task.gym_observation(gym_env.unwrapped), atol=OBS_ATOL
                )
            else:
                assert torch.equal(result.obs[i], result.final_obs[i])
            np.testing.assert_allclose(torch_env.state[i], gym_env.unwrapped.state, atol=STATE_ATOL, rtol=0)
        seen["terminated"] += int(result.terminated.sum())
        seen["truncated"] += int(result.truncated.sum())
    assert {end for end, count in seen.items() if count} == ends_seen


@pytest.mark.parametrize("task", [CARTPOLE, ACROBOT, PENDULUM], ids=["cartpole", "acrobot", "pendulum"])
def test_one_step_from_wide_states_matches_gymnasium(task: Task) -> None:
    num_envs = 256
    torch_env = task.env_cls(num_envs, dtype=torch.float64)
    bound = torch.tensor(task.wide_state_bound, dtype=torch.float64)
    generator = torch.Generator().manual_seed(1)
    states = (2 * torch.rand(num_envs, len(bound), generator=generator, dtype=torch.float64) - 1) * bound
    torch_env.set_state(states)
    actions = _random_actions(torch_env, np.random.default_rng(1))
    result = torch_env.step(torch.as_tensor(actions))
    gym_env = gym.make(task.env_id).unwrapped
    for i in range(num_envs):
        gym_env.reset(seed=i)  # clears CartPole's stepped-after-termination flag
        gym_env.state = states[i].numpy().copy()
        gym_obs, gym_reward, gym_terminated, _, _ = gym_env.step(actions[i])
        np.testing.assert_allclose(result.final_obs[i], gym_obs, atol=OBS_ATOL)
        assert result.reward[i].item() == pytest.approx(gym_reward, abs=REWARD_ATOL)
        assert result.terminated[i].item() == gym_terminated
    if task is not PENDULUM:  # Pendulum never terminates
        assert 0 < result.terminated.sum() < num_envs


@pytest.mark.parametrize("task", [CARTPOLE, ACROBOT, PENDULUM], ids=["cartpole", "acrobot", "pendulum"])
def test_spaces_match_gymnasium(task: Task) -> None:
    gym_env = gym.make(task.env_id)
    torch_env = task.env_cls(2)
    assert torch_env.observation_space == gym_env.observation_space
    assert torch_env.action_space == gym_env.action_space
    assert torch_env.max_episode_steps == gym_env.spec.max_episode_steps


def test_resets_are_seeded_and_within_initial_bounds() -> None:
    first, again, other = (TorchCartPole(64, seed=seed).reset() for seed in (7, 7, 8))
    assert torch.equal(first, again) and not torch.equal(first, other)
    assert first.abs().max() <= 0.05


def test_same_step_auto_reset() -> None:
    env = TorchCartPole(4, max_episode_steps=3)
    env.reset()
    start = torch.tensor(
        [[0.0, 0.0, 0.0, 0.0], [2.39, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    )
    env.set_state(start, episode_steps=torch.tensor([0, 0, 2, 2]))
    result = env.step(torch.tensor([1, 1, 1, 0]))
    # Env 1 leaves the track, envs 2 and 3 hit the time limit; env 0 goes on.
    assert result.terminated.tolist() == [False, True, False, False]
    assert result.truncated.tolist() == [False, False, True, True]
    assert env.episode_steps.tolist() == [1, 0, 0, 0]
    assert result.final_obs[1, 0] > 2.4 and result.obs[1].abs().max() <= 0.05
    assert torch.equal(result.obs[0], result.final_obs[0]) and torch.equal(
        env.state[1:], result.obs[1:].double()
    )
