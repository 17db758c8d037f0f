"""A user's batched torch env with rsl_rl's VecEnv interface (Isaac Lab's): its observation forms
are read, time-outs become truncations, and PPO trains the example class on 1 and 2 ranks."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest
import torch

from distrl.config.sections import EnvConfig
from distrl.envs import make_vec_env
from distrl.envs.rsl_rl_style import RslRlStyleVecEnv
from distrl.errors import UserError
from tests.helpers import CARTPOLE, distrl, train_ranks

EXAMPLE = "examples.isaac_style_cartpole:IsaacStyleCartPole"


class ScriptedEnv:
    """Two envs whose observation is the step count; env 0 terminates at step 2, env 1 times out
    at step 3 (both then restart from 0). Observations come in the form given."""

    num_actions = 1

    def __init__(self, num_envs: int = 2, device: str = "cpu", obs_form: str = "tensor") -> None:
        self.num_envs = num_envs
        self.device = device
        self.obs_form = obs_form
        self.count = torch.zeros(num_envs)

    def get_observations(self):
        return self._wrap(self.count[:, None].clone())

    def step(self, actions: torch.Tensor):
        self.count += 1
        terminated = torch.tensor([self.count[0] == 2, False])
        time_outs = torch.tensor([False, self.count[1] == 3])
        dones = terminated | time_outs
        self.count[dones] = 0
        return self._wrap(self.count[:, None].clone()), torch.ones(2), dones.float(), {"time_outs": time_outs}

    def _wrap(self, obs: torch.Tensor):
        if self.obs_form == "dict":
            return {"policy": obs, "critic": obs}
        if self.obs_form == "pair":  # rsl_rl 1.x/2.x
            return obs, {"observations": {}}
        return obs


@pytest.mark.parametrize("obs_form", ["tensor", "dict", "pair"])
def test_time_outs_are_truncations_and_final_obs_is_the_last_observation_acted_on(obs_form: str) -> None:
    env = RslRlStyleVecEnv(ScriptedEnv(obs_form=obs_form), "test:ScriptedEnv")
    assert env.observation_space.shape == (1,) and env.action_space == gym.spaces.Box(
        -float("inf"), float("inf"), (1,), "float32"
    )
    assert env.reset()[:, 0].tolist() == [0.0, 0.0]
    actions = torch.zeros(2, 1)
    env.step(actions)
    result = env.step(actions)  # env 0 terminates
    assert result.terminated.tolist() == [True, False] and result.truncated.tolist() == [False, False]
    assert result.obs[:, 0].tolist() == [0.0, 2.0] and result.final_obs[:, 0].tolist() == [1.0, 2.0]
    result = env.step(actions)  # env 1 times out
    assert result.terminated.tolist() == [False, False] and result.truncated.tolist() == [False, True]
    assert result.obs[:, 0].tolist() == [1.0, 0.0] and result.final_obs[:, 0].tolist() == [1.0, 2.0]
    assert result.reward.dtype == torch.float32


def test_observations_without_a_policy_group_are_one_clear_error() -> None:
    env = ScriptedEnv(obs_form="dict")
    env.get_observations = lambda: {"critic": torch.zeros(2, 1)}
    with pytest.raises(UserError, match="no 'policy' group"):
        RslRlStyleVecEnv(env, "test:ScriptedEnv")


def test_the_example_class_is_built_with_num_envs_device_and_seed() -> None:
    cfg = EnvConfig(id=EXAMPLE, backend="torch")
    first, again = (make_vec_env(cfg, [7, 8, 9]) for _ in range(2))
    assert first.num_envs == 3 and first.observation_space.shape == (4,)
    torch.testing.assert_close(first.reset(), again.reset())
    with pytest.raises(UserError, match="keeps its own time limit"):
        make_vec_env(EnvConfig(id=EXAMPLE, backend="torch", max_episode_steps=10), [0])


@pytest.mark.slow
@pytest.mark.learning(seeds=3)
@pytest.mark.parametrize("ranks", [1, 2])
def test_ppo_trains_a_users_rsl_rl_style_env(tmp_path: Path, ranks: int, seed: int) -> None:
    args = [
        "--config", str(CARTPOLE), "env.backend=torch", f"env.id={EXAMPLE}", "--seed", str(seed),
        "--total-steps", "200000", "log.tensorboard=false", "--run-dir", str(tmp_path),
    ]  # fmt: skip
    result = distrl("train", *args) if ranks == 1 else train_ranks(2, *args)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(distrl("eval", "--checkpoint", str(tmp_path), "--json").stdout)
    assert report["return_mean"] >= 475
