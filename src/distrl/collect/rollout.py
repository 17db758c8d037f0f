"""PPO's and A2C's collection: step envs with the current policy for one rollout and record what
the update needs. A rank collects from its own envs with one; in Ray mode each env worker runs one
over its part of a rank's envs and the rank joins their segments. Both build it with
``actor_critic_collector`` (the algorithms' ``Algorithm.collector``).

Actions are sampled from ``ActionNoise``, drawn for all of a rank's envs and cut to the
collector's part, so splitting a rank's envs over workers changes no env's action.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from distrl.collect.base import CollectorInputs, CollectRequest, EnvCollector
from distrl.compile import compiled_if
from distrl.envs import VecEnv
from distrl.envs.base import obs_tensor_dtype
from distrl.models.actor_critic import ActorCritic
from distrl.models.memory import reset_ended
from distrl.models.normalizer import RunningMeanStd
from distrl.models.policies import acting_modules, ppo_actor_critic, ppo_normalizers
from distrl.storage.rollout import RolloutSegment, RolloutStorage
from distrl.timing import PhaseClock

if TYPE_CHECKING:
    from distrl.config.run import RunConfig


def finite(obs: torch.Tensor) -> torch.Tensor:
    """Non-finite entries zeroed, so they never reach the policy or the normalisers."""
    return torch.nan_to_num(obs, nan=0.0, posinf=0.0, neginf=0.0)


def noise_seed(seed: int, rank: int, launch_index: int) -> list[int]:
    """A rank's action-noise seed; a resumed launch draws fresh numbers."""
    return [seed, rank, launch_index, 1]


class ActionNoise:
    """The random numbers behind one rank's actions: each step draws ``shape`` (a row per env of
    the rank) from one generator, normal or uniform, and keeps ``part``'s rows."""

    def __init__(
        self, shape: tuple[int, ...], gaussian: bool, seed: list[int], part: slice, device: torch.device
    ) -> None:
        self._shape = shape
        self._draw = torch.randn if gaussian else torch.rand
        self._part = part
        self._device = device
        self._generator = torch.Generator(device=device)
        self._generator.manual_seed(int(np.random.SeedSequence(seed).generate_state(1)[0]))

    def draw(self) -> torch.Tensor:
        return self._draw(self._shape, generator=self._generator, device=self._device)[self._part]

    @classmethod
    def for_policy(
        cls, policy: ActorCritic, seed: list[int], rows: int, part: slice, device: torch.device
    ) -> ActionNoise:
        """What PPO's sampled actions need: normal noise for Box actions, uniform for Discrete."""
        return cls(policy.noise_shape(rows), policy.continuous, seed, part, device)


class RolloutCollector(EnvCollector):
    """Steps ``env`` with ``policy`` and the normalisers (read here, updated by the learner).
    A policy with memory carries a state per env across rollouts, zeroed after a step that ends
    the agent's episode and when the envs are reset (a new launch, a rebuilt env worker)."""

    def __init__(
        self,
        cfg: RunConfig,
        env: VecEnv,
        policy: ActorCritic,
        obs_rms: RunningMeanStd | None,
        return_rms: RunningMeanStd | None,
        noise: ActionNoise,
        device: torch.device,
        clock: PhaseClock | None = None,
    ) -> None:
        super().__init__(env, device, clock)
        self.cfg = cfg
        self.policy = policy
        self.obs_rms = obs_rms
        self.return_rms = return_rms
        self.noise = noise
        # train.compile: acting fused too, as rsl_rl's torch_compile_mode compiles its actor and critic.
        self.act = compiled_if(cfg.train.compile, policy.act, device)
        continuous = policy.continuous
        self.storage = RolloutStorage(
            cfg.algo.rollout_steps,
            env.num_envs,
            env.observation_space.shape,
            env.action_space.shape,  # () for Discrete, one entry per dimension for MultiDiscrete
            torch.float32 if continuous else torch.int64,
            device,
            track_returns=return_rms is not None,
            obs_dtype=obs_tensor_dtype(env.observation_space),
            state_size=policy.state_size,
        )
        self.memory_state = policy.initial_state(env.num_envs, device)
        self.discounted_return = torch.zeros(env.num_envs, dtype=torch.float64, device=device)
        self.action_bounds = _action_bounds(env.action_space, device)

    def reset(self) -> torch.Tensor:
        self.memory_state.zero_()
        return super().reset()

    def collect(self, request: CollectRequest) -> RolloutSegment:
        gamma = self.cfg.algo.gamma
        store = self.storage
        should_stop = request.should_stop
        obs, state = self.obs, self.memory_state
        nonfinite_final_obs = False
        for t in range(self.cfg.algo.rollout_steps):
            if should_stop(t):
                break
            if store.raw_obs is not store.obs:  # as the env gave it: the update skips non-finite ones
                store.raw_obs[t] = obs
            obs_t = self.normalize_obs(finite(obs))
            with self.clock("inference"):
                actions, log_probs, values, next_state = self.act(obs_t, self.noise.draw(), state)
            with self.clock("env"):
                result = self.env.step(self._to_env_actions(actions))
            reward, terminated, truncated = (x.to(self.device) for x in result[1:4])
            dones = terminated | truncated
            store.env_rewards[t] = reward
            store.episode_ends[t] = dones
            if result.life_lost is not None:  # the agent's episode ends; the game goes on
                terminated = terminated | result.life_lost.to(self.device)
                dones = terminated | truncated
            rewards = self._scale_rewards(reward, dones, t)
            # A truncated episode did not end in the MDP: bootstrap from its final observation,
            # seen with the state the episode had (not the reset one).
            if truncated.any():
                with torch.no_grad(), self.clock("inference"):
                    final_obs = result.final_obs.to(self.device)
                    # A host check, in the rare branch that synchronised for truncated.any() anyway.
                    nonfinite_final_obs |= not torch.isfinite(final_obs).all()
                    final_values = self.policy.value(self.normalize_obs(finite(final_obs)), next_state)
                rewards = rewards + gamma * final_values * (truncated & ~terminated)
            store.add(obs_t, actions, log_probs, values, rewards, dones, state)
            obs, state = result.obs.to(self.device), reset_ended(next_state, dones)
        self.obs, self.memory_state = obs, state
        with torch.no_grad(), self.clock("inference"):
            last_values = self.policy.value(self.normalize_obs(finite(obs)), state)
        return store.segment(
            last_values, self.take_restarted(), bool(nonfinite_final_obs), request.policy_version
        )

    def normalize_obs(self, obs: torch.Tensor) -> torch.Tensor:
        if self.obs_rms is None:
            return obs
        return self.obs_rms.normalize(obs, self.cfg.normalize.clip)

    def _scale_rewards(self, rewards: torch.Tensor, dones: torch.Tensor, t: int) -> torch.Tensor:
        if self.cfg.normalize.clip_rewards:
            rewards = torch.sign(rewards)
        if self.return_rms is None:
            return rewards
        self.discounted_return = self.discounted_return * self.cfg.algo.gamma + rewards
        self.storage.raw_returns[t] = self.discounted_return
        self.discounted_return.masked_fill_(dones, 0.0)
        return self.return_rms.scale(rewards, self.cfg.normalize.clip)

    def _to_env_actions(self, actions: torch.Tensor) -> torch.Tensor:
        if self.action_bounds is not None:
            # Sample stays unclipped in the buffer (its log-prob is exact); the env gets it clipped.
            actions = torch.clamp(actions, *self.action_bounds)
        return actions.to(self.env.device)


def _action_bounds(space: gym.spaces.Space, device: torch.device) -> tuple[torch.Tensor, torch.Tensor] | None:
    if not isinstance(space, gym.spaces.Box):
        return None
    return (
        torch.as_tensor(space.low, dtype=torch.float32, device=device),
        torch.as_tensor(space.high, dtype=torch.float32, device=device),
    )


def actor_critic_collector(inputs: CollectorInputs) -> RolloutCollector:
    """PPO's and A2C's collector (``Algorithm.collector``), acting with the ``policy`` of
    ``inputs.modules`` and its normalisers where in use."""
    policy = inputs.modules["policy"]
    noise = ActionNoise.for_policy(policy, inputs.noise_seed, inputs.noise_rows, inputs.part, inputs.device)
    obs_rms, return_rms = inputs.modules.get("obs_rms"), inputs.modules.get("return_rms")
    return RolloutCollector(
        inputs.cfg, inputs.env, policy, obs_rms, return_rms, noise, inputs.device, inputs.clock
    )


def actor_critic_copies(
    cfg: RunConfig, observation_space: gym.Space, action_space: gym.Space, device: torch.device
) -> dict[str, nn.Module]:
    """What PPO and A2C act with, freshly built (``Algorithm.acting``)."""
    policy = ppo_actor_critic(cfg, observation_space, action_space, device)
    return acting_modules(policy, *ppo_normalizers(cfg, observation_space, action_space, device))
