"""DQN's collected steps, ``[steps, envs, ...]``, before they go into the replay buffer: what a
rank's own envs or its env workers hand the learner (workers' parts joined along the env axis)."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from distrl.storage.segments import join_along_envs, joined_version


@dataclass
class TransitionSegment:
    obs: torch.Tensor
    actions: torch.Tensor
    behaviour_log_probs: torch.Tensor
    """``[steps, envs]``: the log-probability of each action under the policy that took it,
    exploration included (DQN's epsilon-greedy; SAC's squashed Gaussian over its ``[-1, 1]``
    actions, or the uniform warm-up): what importance weights divide by."""
    rewards: torch.Tensor
    """What the agent learns from (their sign with ``normalize.clip_rewards``)."""
    next_obs: torch.Tensor
    """The observation each step led to, also where the episode ended (the env's final one)."""
    terminated: torch.Tensor
    """The agent's episode ended in the MDP (a lost life under episodic life too): no bootstrap."""
    ended: torch.Tensor
    """Terminated or truncated: the agent's episode is over either way."""
    env_rewards: torch.Tensor
    """As the envs gave them: the episode returns."""
    episode_ends: torch.Tensor
    """Where the envs' episodes (whole games) end: the statistics'."""
    restarted: torch.Tensor
    """``[envs]`` bool: the env was reset before this segment, cutting its running episode (the
    first segment; an env worker rebuilt after a failure)."""
    policy_version: int
    """The learner's updates whose weights acted (``storage.segments``)."""
    episodes_cut: bool = False
    """Its ``restarted`` envs were not reset: segments before it were dropped (collecting ahead),
    so their running episodes lost steps, and their next ends close episodes whose returns are
    not whole (``runners.episodes``)."""

    @property
    def steps(self) -> int:
        return self.obs.shape[0]

    @classmethod
    def join(cls, parts: list[TransitionSegment], device: torch.device) -> TransitionSegment:
        """Segments of the same steps over consecutive envs as one, on ``device``."""
        names = [f.name for f in fields(cls) if f.name not in ("policy_version", "episodes_cut")]
        return cls(
            **join_along_envs(parts, names, ("restarted",), device),
            policy_version=joined_version(parts),
            episodes_cut=any(p.episodes_cut for p in parts),
        )
