"""One rank's replay buffer: the last ``capacity`` steps of each of its envs, sampled uniformly,
with n-step returns computed at sampling time."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from distrl.storage.transitions import TransitionSegment


@dataclass
class TransitionBatch:
    """n-step transitions: ``returns`` = sum of the first ``steps`` discounted rewards, then
    bootstrap from ``next_obs`` with gamma ** steps unless ``terminated``."""

    obs: torch.Tensor
    actions: torch.Tensor
    returns: torch.Tensor
    next_obs: torch.Tensor
    terminated: torch.Tensor
    steps: torch.Tensor
    next_action_mask: torch.Tensor | None = None
    """Actions possible in ``next_obs`` (logged data); None: all of them. With parametric
    actions: which of ``next_candidates`` are real."""
    candidates: torch.Tensor | None = None
    """Parametric actions only: [batch, K, action features] of each row's candidates (padded;
    ``candidate_mask`` marks real ones); ``actions`` index into them."""
    candidate_mask: torch.Tensor | None = None
    next_candidates: torch.Tensor | None = None

    def __len__(self) -> int:
        return self.obs.shape[0]


class ReplayBuffer:
    """[capacity, envs] ring buffers. ``next_obs`` is the observation the step led to (the final
    observation for an episode that ended), ``terminated`` says the MDP ended there (no
    bootstrap), ``ended`` that the episode ended either way (n-step sums stop there)."""

    def __init__(
        self,
        capacity: int,
        num_envs: int,
        obs_shape: int | tuple[int, ...],
        device: torch.device,
        obs_dtype: torch.dtype = torch.float32,
        action_shape: tuple[int, ...] = (),
        action_dtype: torch.dtype = torch.int64,
    ) -> None:
        """``obs_shape``: one observation's (a feature vector's length, or an image's shape),
        stored in ``obs_dtype`` (uint8 frames as they are: a quarter of float32's bytes);
        ``action_shape``/``action_dtype``: one action's (a Discrete index, or a Box's vector)."""
        self.capacity = capacity
        self.num_envs = num_envs
        shape = (capacity, num_envs)
        obs_shape = (obs_shape,) if isinstance(obs_shape, int) else tuple(obs_shape)
        self.obs = torch.zeros((*shape, *obs_shape), dtype=obs_dtype, device=device)
        self.next_obs = torch.zeros((*shape, *obs_shape), dtype=obs_dtype, device=device)
        self.actions = torch.zeros((*shape, *action_shape), dtype=action_dtype, device=device)
        self.rewards = torch.zeros(shape, device=device)
        self.terminated = torch.zeros(shape, dtype=torch.bool, device=device)
        self.ended = torch.zeros(shape, dtype=torch.bool, device=device)
        self.position = 0
        """Next row to write."""
        self.size = 0
        """Rows written so far, up to ``capacity``."""

    def add(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        ended: torch.Tensor,
    ) -> None:
        """One step of every env."""
        row = self.position
        self.obs[row] = obs
        self.actions[row] = actions
        self.rewards[row] = rewards
        self.next_obs[row] = next_obs
        self.terminated[row] = terminated
        self.ended[row] = ended
        self.position = (row + 1) % self.capacity
        self.size = min(self.size + 1, self.capacity)

    def add_segment(self, segment: TransitionSegment) -> None:
        """A collected segment, step by step; its ``restarted`` envs' running episodes cut first."""
        self.cut(segment.restarted)
        for t in range(segment.steps):
            self.add(
                segment.obs[t],
                segment.actions[t],
                segment.rewards[t],
                segment.next_obs[t],
                segment.terminated[t],
                segment.ended[t],
            )

    def cut(self, envs: torch.Tensor) -> None:
        """The running episodes of ``envs`` (``[num_envs]`` bool) were cut (an env worker rebuilt
        its envs): the newest row ends them, so no n-step return runs on into the fresh episodes.
        The row still bootstraps from its own next observation (ended, not terminated)."""
        if self.size:
            self.ended[(self.position - 1) % self.capacity] |= envs

    def sample(
        self, batch_size: int, n_step: int, gamma: float, generator: torch.Generator | None = None
    ) -> TransitionBatch:
        """``batch_size`` transitions drawn uniformly from the rows that have ``n_step`` rows
        written after them (or fewer when the episode ends first)."""
        usable = self.size - (n_step - 1)
        if usable < 1:
            raise ValueError(f"replay buffer holds {self.size} steps per env: too few for n_step={n_step}")
        device = self.obs.device
        # Row offsets counted from the oldest row, so row + k for k < n_step was written after it.
        oldest = (self.position - self.size) % self.capacity
        offset = torch.randint(usable, (batch_size,), generator=generator).to(device)
        env = torch.randint(self.num_envs, (batch_size,), generator=generator).to(device)
        row = (oldest + offset) % self.capacity
        returns = torch.zeros(batch_size, device=device)
        steps = torch.zeros(batch_size, dtype=torch.int64, device=device)
        last = row.clone()
        running = torch.ones(batch_size, dtype=torch.bool, device=device)
        for k in range(n_step):
            at = (row + k) % self.capacity
            returns += running * (gamma**k) * self.rewards[at, env]
            steps += running
            last = torch.where(running, at, last)
            running &= ~self.ended[at, env]
        return TransitionBatch(
            obs=self.obs[row, env],
            actions=self.actions[row, env],
            returns=returns,
            next_obs=self.next_obs[last, env],
            terminated=self.terminated[last, env],
            steps=steps,
        )
