"""Replay-based algorithms' collection (DQN, SAC, TD3): steps of envs with an exploring policy,
into segments of transitions. A rank collects from its own envs with one; in Ray mode each env
worker runs one over its part of a rank's envs and the rank joins their segments before they go
into its replay buffer. Each algorithm's collector builds one with its own exploring policy
(DQN's: ``algorithms.dqn.acting``).

Exploration draws its numbers per env and step from ``ActionNoise`` (for DQN two uniform ones:
whether to explore, which action), drawn for all of a rank's envs and cut to the collector's
part, so splitting a rank's envs over workers changes no env's action.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import torch

from distrl.collect.base import CollectRequest, EnvCollector
from distrl.collect.rollout import ActionNoise
from distrl.envs import VecEnv
from distrl.moved import moved_name
from distrl.storage.transitions import TransitionSegment
from distrl.timing import PhaseClock

if TYPE_CHECKING:
    from distrl.config.run import RunConfig


def exploration_noise(seed: list[int], rows: int, part: slice, device: torch.device) -> ActionNoise:
    """Per env and step: a uniform number deciding whether to explore, another picking the action."""
    return ActionNoise((rows, 2), False, seed, part, device)


class ExploringPolicy(Protocol):
    def __call__(
        self, obs: torch.Tensor, noise: torch.Tensor, exploration: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The env actions for ``obs``, from this step's ``noise`` rows and the algorithm's
        exploration setting (DQN's epsilon; SAC's share of uniformly random actions), and their
        log-probabilities under that exploring (behaviour) policy."""
        ...


class TransitionCollector(EnvCollector):
    """Steps ``env`` with ``policy``. Under episodic life a lost life ends the agent's episode
    (CleanRL's Atari DQN) while the game, the statistics' episode, goes on;
    ``normalize.clip_rewards`` stores the rewards' sign."""

    def __init__(
        self,
        cfg: RunConfig,
        env: VecEnv,
        policy: ExploringPolicy,
        noise: ActionNoise,
        device: torch.device,
        clock: PhaseClock | None = None,
    ) -> None:
        super().__init__(env, device, clock)
        self.rollout_steps = cfg.algo.rollout_steps
        self.clip_rewards = cfg.normalize.clip_rewards
        self.policy = policy
        self.noise = noise

    @torch.no_grad()
    def collect(self, request: CollectRequest) -> TransitionSegment:
        """``rollout_steps`` steps of every env, exploring as ``request.exploration`` says."""
        obs, exploration = self.obs, request.exploration
        steps = []
        for _ in range(self.rollout_steps):
            with self.clock("inference"):
                actions, log_probs = self.policy(obs, self.noise.draw(), exploration)
            with self.clock("env"):
                result = self.env.step(actions.to(self.env.device))
            next_obs, reward, terminated, truncated, final_obs = (x.to(self.device) for x in result[:5])
            game_over = terminated | truncated
            if result.life_lost is not None:  # the agent's episode ends; the game goes on
                terminated = terminated | result.life_lost.to(self.device)
            learnt = torch.sign(reward) if self.clip_rewards else reward
            ended = terminated | truncated
            steps.append((obs, actions, log_probs, learnt, final_obs, terminated, ended, reward, game_over))
            obs = next_obs
        self.obs = obs
        columns = (torch.stack(column) for column in zip(*steps, strict=True))
        return TransitionSegment(
            *columns, restarted=self.take_restarted(), policy_version=request.policy_version
        )


def __getattr__(name: str) -> Any:
    """Names that moved to an algorithm's package (DQN's), for one release (``distrl.moved``)."""
    return moved_name(__name__, name)
