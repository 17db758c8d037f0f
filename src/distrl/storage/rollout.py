"""On-policy rollout buffer of one rank (up to a fixed number of steps), with GAE."""

from __future__ import annotations

from dataclasses import Field, dataclass, fields, replace

import torch

from distrl.storage.segments import join_along_envs, joined_version


@dataclass
class RolloutBatch:
    """Flat training batch consumed by the PPO update: chunks of ``sequence_length`` consecutive
    steps of one env, step-major (row ``step * chunks + chunk``). Without memory a chunk is one
    step and the rows are the (steps * envs) samples."""

    obs: torch.Tensor
    actions: torch.Tensor
    behaviour_log_probs: torch.Tensor
    """Of the actions under the policy that took them (PPO's ratio divides by them)."""
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    memory_states: torch.Tensor | None = None
    """With memory: the state acting had at each step (a chunk replays from its first step's)."""
    dones: torch.Tensor | None = None
    """With memory: where episodes ended (the state is reset after those steps)."""
    sequence_length: int = 1

    def __len__(self) -> int:
        return self.obs.shape[0]

    @property
    def num_chunks(self) -> int:
        return len(self) // self.sequence_length

    def chunks(self, idx: torch.Tensor) -> RolloutBatch:
        """The batch of chunks ``idx`` (in that order), step-major as this one."""
        idx = idx.to(self.obs.device)  # index_select, unlike t[idx], wants the index on t's device
        steps = torch.arange(self.sequence_length, device=idx.device).unsqueeze(-1)
        rows = (steps * self.num_chunks + idx).reshape(-1)
        return replace(self, **{f.name: t.index_select(0, rows) for f, t in self._tensors()})

    def start_states(self) -> torch.Tensor | None:
        """Each chunk's state at its first step (the first ``num_chunks`` rows)."""
        return None if self.memory_states is None else self.memory_states[: self.num_chunks]

    def _tensors(self) -> list[tuple[Field, torch.Tensor]]:
        return [(f, t) for f in fields(self) if isinstance(t := getattr(self, f.name), torch.Tensor)]


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


PER_ENV = ("last_values", "restarted")
"""``RolloutSegment``'s ``[envs]`` fields; the others are ``[steps, envs, ...]``."""


@dataclass
class RolloutSegment:
    """A rollout of some envs, ``[steps, envs, ...]``: what GAE and the update read, and what the
    rank's normalisers and episode statistics take from it. A rank's rollout is the segments of
    its collectors joined along the env axis."""

    obs: torch.Tensor
    """As the policy saw them (normalised feature vectors; images as the env gave them)."""
    actions: torch.Tensor
    behaviour_log_probs: torch.Tensor
    """Of each action under the policy that sampled it (the one of ``policy_version``)."""
    values: torch.Tensor
    rewards: torch.Tensor
    """Scaled, with truncations bootstrapped: what GAE reads."""
    dones: torch.Tensor
    """Where the agent's episodes end for learning (a lost life under episodic life too)."""
    env_rewards: torch.Tensor
    """As the envs gave them: the episode returns."""
    episode_ends: torch.Tensor
    """``[steps, envs]`` bool: where the envs' episodes (whole games) end: the statistics'."""
    raw_obs: torch.Tensor
    """As the envs gave them: the observation statistics and the non-finite check (for integer
    observations the same tensor as ``obs``)."""
    raw_returns: torch.Tensor
    """Discounted running returns behind the reward scale (``[steps, 0]`` without reward scaling)."""
    memory_states: torch.Tensor
    """``[steps, envs, state_size]``: the memory state each step was acted from (width 0 without
    memory)."""
    last_values: torch.Tensor
    """``[envs]``: values of the observation after the last step."""
    restarted: torch.Tensor
    """``[envs]`` bool: the env was reset before this segment, cutting its running episode (the
    first rollout; an env worker rebuilt after a failure)."""
    nonfinite_final_obs: bool
    """A final observation (bootstrapping a truncation) was not finite."""
    policy_version: int
    """The learner's updates whose weights acted (``storage.segments``)."""
    episodes_cut: bool = False
    """Its ``restarted`` envs were not reset: segments before it were dropped (collecting ahead),
    so their running episodes lost steps, and their next ends close episodes whose returns are
    not whole (``runners.episodes``)."""

    @property
    def steps(self) -> int:
        return self.obs.shape[0]

    def batch(self, gamma: float, gae_lambda: float, sequence_length: int = 1) -> RolloutBatch:
        """GAE over the segment as the update's batch (``training_batch``)."""
        advantages, returns = compute_gae(
            self.rewards, self.values, self.dones, self.last_values, gamma, gae_lambda
        )
        return self.training_batch(advantages, returns, sequence_length)

    def training_batch(
        self,
        advantages: torch.Tensor,
        returns: torch.Tensor,
        sequence_length: int = 1,
        old_log_probs: torch.Tensor | None = None,
        values: torch.Tensor | None = None,
    ) -> RolloutBatch:
        """The segment as the update's batch with these ``[steps, envs]`` advantages and returns
        (and old log-probabilities and values, by default the acting policy's): with memory,
        chunks of ``sequence_length`` steps (which divides the segment's steps) with their
        states; without, the (steps * envs) samples."""
        old_log_probs = self.behaviour_log_probs if old_log_probs is None else old_log_probs
        values = self.values if values is None else values
        steps = (self.obs, self.actions, old_log_probs, values, advantages, returns)
        if self.memory_states.shape[-1] == 0:
            return RolloutBatch(*(t.flatten(0, 1) for t in steps))
        memory = (self.memory_states, self.dones)
        return RolloutBatch(
            *(step_major_chunks(t, sequence_length) for t in (*steps, *memory)), sequence_length
        )

    @classmethod
    def join(cls, parts: list[RolloutSegment], device: torch.device) -> RolloutSegment:
        """Segments of the same steps over consecutive envs as one, on ``device``."""
        # Integer frames are one tensor in each part (``raw_obs`` is ``obs``): one copy joined.
        shared = all(p.raw_obs is p.obs for p in parts)
        skipped = {"nonfinite_final_obs", "policy_version", "episodes_cut", *(["raw_obs"] if shared else [])}
        joined = join_along_envs(
            parts, [f.name for f in fields(cls) if f.name not in skipped], PER_ENV, device
        )
        if shared:
            joined["raw_obs"] = joined["obs"]
        nonfinite = any(p.nonfinite_final_obs for p in parts)
        cut = any(p.episodes_cut for p in parts)
        return cls(
            **joined, nonfinite_final_obs=nonfinite, policy_version=joined_version(parts), episodes_cut=cut
        )


def step_major_chunks(t: torch.Tensor, length: int) -> torch.Tensor:
    """``[steps, envs, ...]`` as rows ``step_in_chunk * chunks + chunk``, a chunk being ``length``
    consecutive steps of one env (chunk index ``chunk_of_rollout * envs + env``)."""
    steps, envs = t.shape[:2]
    return t.reshape(steps // length, length, envs, *t.shape[2:]).transpose(0, 1).reshape(-1, *t.shape[2:])


class RolloutStorage:
    """Preallocated [steps, envs, ...] tensors, filled one step at a time."""

    def __init__(
        self,
        num_steps: int,
        num_envs: int,
        obs_shape: int | tuple[int, ...],
        action_shape: tuple[int, ...],
        action_dtype: torch.dtype,
        device: torch.device,
        track_returns: bool = False,
        obs_dtype: torch.dtype = torch.float32,
        state_size: int = 0,
    ) -> None:
        """``obs_shape``: one observation's (a feature vector's length, or an image's shape),
        stored in ``obs_dtype`` (uint8 frames as they are); ``track_returns``: keep the
        discounted running returns (reward scaling); ``state_size``: the policy's memory
        state's width."""
        shape = (num_steps, num_envs)
        obs_shape = (obs_shape,) if isinstance(obs_shape, int) else tuple(obs_shape)
        self.obs = torch.zeros((*shape, *obs_shape), dtype=obs_dtype, device=device)
        self.actions = torch.zeros((*shape, *action_shape), dtype=action_dtype, device=device)
        self.behaviour_log_probs = torch.zeros(shape, device=device)
        self.values = torch.zeros(shape, device=device)
        self.rewards = torch.zeros(shape, device=device)
        self.dones = torch.zeros(shape, device=device)
        self.env_rewards = torch.zeros(shape, device=device)
        self.episode_ends = torch.zeros(shape, dtype=torch.bool, device=device)
        # Integer observations are always finite and never normalised: the raw ones are the
        # stored ones, not a second copy. Float ones are kept as the env gave them for the
        # non-finite check (and the statistics when normalising).
        floats = obs_dtype.is_floating_point
        self.raw_obs = torch.zeros_like(self.obs) if floats else self.obs
        returns_shape = shape if track_returns else (num_steps, 0)
        self.raw_returns = torch.zeros(returns_shape, dtype=torch.float64, device=device)
        self.memory_states = torch.zeros((*shape, state_size), device=device)
        self.num_steps = num_steps
        self.step = 0

    def add(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        behaviour_log_probs: torch.Tensor,
        values: torch.Tensor,
        rewards: torch.Tensor,
        dones: torch.Tensor,
        memory_states: torch.Tensor,
    ) -> None:
        """Close step ``self.step`` (its ``raw_obs``, ``env_rewards``, ``episode_ends`` and
        ``raw_returns`` rows are written by the collector as they come)."""
        t = self.step
        self.obs[t] = obs
        self.memory_states[t] = memory_states
        self.actions[t] = actions
        self.behaviour_log_probs[t] = behaviour_log_probs
        self.values[t] = values
        self.rewards[t] = rewards
        self.dones[t] = dones
        self.step += 1

    def segment(
        self,
        last_values: torch.Tensor,
        restarted: torch.Tensor,
        nonfinite_final_obs: bool,
        policy_version: int,
    ) -> RolloutSegment:
        """The steps added so far (views, valid until the next rollout), acted with the weights of
        ``policy_version``; resets the write position."""
        n, self.step = self.step, 0
        assert n > 0, "rollout is empty"
        return RolloutSegment(
            obs=self.obs[:n],
            actions=self.actions[:n],
            behaviour_log_probs=self.behaviour_log_probs[:n],
            values=self.values[:n],
            rewards=self.rewards[:n],
            dones=self.dones[:n],
            env_rewards=self.env_rewards[:n],
            episode_ends=self.episode_ends[:n],
            raw_obs=self.raw_obs[:n],
            raw_returns=self.raw_returns[:n],
            memory_states=self.memory_states[:n],
            last_values=last_values,
            restarted=restarted,
            nonfinite_final_obs=nonfinite_final_obs,
            policy_version=policy_version,
        )
