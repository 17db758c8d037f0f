"""On-policy rollout buffer of one rank (up to a fixed number of steps), with GAE."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class RolloutBatch:
    """Flat (steps * envs) training batch consumed by the PPO update."""

    obs: torch.Tensor
    actions: torch.Tensor
    log_probs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor

    def __len__(self) -> int:
        return self.obs.shape[0]

    def index(self, idx: torch.Tensor) -> RolloutBatch:
        return RolloutBatch(*(t[idx] for t in self._fields()))

    def _fields(self) -> tuple[torch.Tensor, ...]:
        return (self.obs, self.actions, self.log_probs, self.values, self.advantages, self.returns)


def compute_gae(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    last_values: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over a [steps, envs] rollout.

    ``dones[t]`` marks that the episode ended at step t, so nothing flows back from t+1. Truncated
    episodes must already carry gamma * V(final_obs) in ``rewards[t]``.
    Returns (advantages, returns) with returns = advantages + values.
    """
    advantages = torch.zeros_like(rewards)
    next_advantage = torch.zeros_like(last_values)
    next_values = last_values
    for t in reversed(range(rewards.shape[0])):
        not_done = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_values * not_done - values[t]
        next_advantage = delta + gamma * gae_lambda * not_done * next_advantage
        advantages[t] = next_advantage
        next_values = values[t]
    return advantages, advantages + values


class RolloutStorage:
    """Preallocated [steps, envs, ...] tensors, filled one step at a time."""

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        obs_dim: int,
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
        device: torch.device,
    ) -> None:
        shape = (num_steps, num_envs)
        self.obs = torch.zeros((*shape, obs_dim), device=device)
        self.actions = torch.zeros((*shape, *action_shape), dtype=action_dtype, device=device)
        self.log_probs = torch.zeros(shape, device=device)
        self.values = torch.zeros(shape, device=device)
        self.rewards = torch.zeros(shape, device=device)
        self.dones = torch.zeros(shape, device=device)
        self.num_steps = num_steps
        self.step = 0

    def add(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        log_probs: torch.Tensor,
        values: torch.Tensor,
        rewards: torch.Tensor,
        dones: torch.Tensor,
    ) -> None:
        t = self.step
        self.obs[t] = obs
        self.actions[t] = actions
        self.log_probs[t] = log_probs
        self.values[t] = values
        self.rewards[t] = rewards
        self.dones[t] = dones
        self.step += 1

    def batch(self, last_values: torch.Tensor, gamma: float, gae_lambda: float) -> RolloutBatch:
        """Compute GAE over the steps added so far (``last_values`` are the values of the
        observation after the last of them) and return them flattened; resets the write position."""
        n, self.step = self.step, 0
        assert n > 0, "rollout is empty"
        advantages, returns = compute_gae(
            self.rewards[:n], self.values[:n], self.dones[:n], last_values, gamma, gae_lambda
        )
        return RolloutBatch(
            obs=self.obs[:n].flatten(0, 1),
            actions=self.actions[:n].flatten(0, 1),
            log_probs=self.log_probs[:n].flatten(0, 1),
            values=self.values[:n].flatten(0, 1),
            advantages=advantages.flatten(0, 1),
            returns=returns.flatten(0, 1),
        )
