"""PPO's collection: step envs with the current policy for one rollout and record what the
update needs. A rank collects from its own envs with one; in Ray mode each env worker runs one
over its part of a rank's envs and the rank joins their segments.

Actions are sampled from ``ActionNoise``, drawn for all of a rank's envs and cut to the
collector's part, so splitting a rank's envs over workers changes no env's action.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from distrl.compile import compiled_if
from distrl.envs import VecEnv
from distrl.envs.base import obs_tensor_dtype
from distrl.models.actor_critic import ActorCritic
from distrl.models.memory import reset_ended
from distrl.models.normalizer import RunningMeanStd
from distrl.models.policies import acting_modules, ppo_actor_critic, ppo_normalizers
from distrl.storage.rollout import RolloutSegment, RolloutStorage
from distrl.storage.transitions import TransitionSegment
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


class Collection(Protocol):
    """Where a rank's rollouts come from: its own envs (``RolloutCollector``) or env workers."""

    def reset(self) -> torch.Tensor:
        """Reset every env; their first observations, as the envs gave them."""
        ...

    def rollout(self, should_stop: Callable[[int], bool]) -> RolloutSegment:
        """One rollout of all the rank's envs, on the rank's device, up to ``rollout_steps`` steps
        (fewer once ``should_stop(steps so far)``, where the collection can be cut)."""
        ...

    def counts(self) -> dict[str, float]:
        """Events of this rank's collection since the launch started (``IterationResult.counted``)."""
        ...

    def close(self) -> None: ...


class TransitionSource(Protocol):
    """Where a replay-based rank's transitions come from: its own envs (``TransitionCollector``)
    or env workers."""

    def reset(self) -> torch.Tensor: ...

    def collect(self, exploration: float) -> TransitionSegment:
        """``rollout_steps`` steps of all the rank's envs, on the rank's device, exploring as
        ``exploration`` says (DQN's epsilon)."""
        ...

    def counts(self) -> dict[str, float]: ...

    def close(self) -> None: ...


class EnvWorkers(Protocol):
    """Processes that step a rank's envs for it (Ray mode's environment workers), whatever the
    algorithm: each acts with a copy of what the rank acts with and hands back segments."""

    def start(self, cfg: RunConfig, seeds: list[int], noise_seed: list[int]) -> tuple[gym.Space, gym.Space]:
        """Build the envs (global seeds ``seeds``, shared out over the workers) and each worker's
        acting copy for ``cfg``'s algorithm; their (observation space, action space)."""
        ...

    def acting(self, modules: dict[str, torch.nn.Module], device: torch.device) -> RemoteCollection:
        """Segments from the workers, acting with the current state of ``modules`` (by their
        checkpoint names), joined on ``device``."""
        ...


class RemoteCollection(Collection, TransitionSource, Protocol):
    """A rank's env workers as its collection: rollouts (PPO) or transitions (DQN), whichever
    the workers' collectors make."""


class EnvCollector:
    """What a collector over a rank's own envs (or a worker's part of them) keeps between
    segments: the observation the next one starts from and the envs reset since the last one."""

    def __init__(self, env: VecEnv, device: torch.device, clock: PhaseClock | None) -> None:
        self.env = env
        self.device = device
        self.clock = clock or PhaseClock()
        """Where stepping and acting are timed (the training loop's clock; an env worker's own)."""
        self.obs: torch.Tensor | None = None
        self.restarted = torch.zeros(env.num_envs, dtype=torch.bool, device=device)

    def reset(self) -> torch.Tensor:
        self.obs = self.env.reset().to(self.device)
        self.restarted.fill_(True)
        return self.obs

    def take_restarted(self) -> torch.Tensor:
        """The envs reset since the last segment (cleared: the next segment continues them)."""
        restarted, self.restarted = self.restarted, torch.zeros_like(self.restarted)
        return restarted

    def segment(self, *args: Any) -> RolloutSegment | TransitionSegment:
        """One segment of the algorithm's kind (what an env worker hands back)."""
        raise NotImplementedError

    def counts(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        self.env.close()


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

    def segment(self) -> RolloutSegment:
        return self.rollout()

    def reset(self) -> torch.Tensor:
        self.memory_state.zero_()
        return super().reset()

    def rollout(self, should_stop: Callable[[int], bool] = lambda steps: False) -> RolloutSegment:
        gamma = self.cfg.algo.gamma
        store = self.storage
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
        return store.segment(last_values, self.take_restarted(), bool(nonfinite_final_obs))

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


def env_worker_collector(
    cfg: RunConfig, env: VecEnv, noise_seed: list[int], noise_rows: int, part: slice
) -> tuple[dict[str, nn.Module], RolloutCollector]:
    """PPO on an env worker: a CPU copy of what acts, by checkpoint name (each rollout's weights
    are loaded into it), and a collector of ``env`` acting with it. ``part``: the worker's envs
    among its learner's ``noise_rows``, so it draws the same action noise those envs would get
    in one process."""
    cpu = torch.device("cpu")
    policy = ppo_actor_critic(cfg, env.observation_space, env.action_space, cpu)
    obs_rms, return_rms = ppo_normalizers(cfg, env.observation_space, env.action_space)
    noise = ActionNoise.for_policy(policy, noise_seed, noise_rows, part, cpu)
    collector = RolloutCollector(cfg, env, policy, obs_rms, return_rms, noise, cpu)
    return acting_modules(policy, obs_rms, return_rms), collector
