"""DQN's runners: what online and offline DQN share (``QLearningRunner``), and online DQN, which
steps its envs epsilon-greedily into each rank's replay buffer (``runners.replay``); the target
network, a copy of identical online networks, stays identical on every rank."""

from __future__ import annotations

import functools

import gymnasium as gym
import torch
from torch import nn

from distrl.algorithms.dqn.networks import greedy_policy, make_q_network
from distrl.algorithms.dqn.update import DQN
from distrl.errors import UserError
from distrl.io.train_state import ModuleTrainState, TrainState
from distrl.runners.base import (
    CountsGradientSteps,
    RunContext,
    Runner,
    start_rank_envs,
)
from distrl.runners.learner import set_up_learner
from distrl.runners.replay import ReplayRunner, batch_share


class QLearningRunner(CountsGradientSteps, Runner):
    """What online and offline DQN share: the Q-network and its learner, checkpoint contents, and
    the greedy policy."""

    algorithm = "dqn"

    def __init__(
        self, ctx: RunContext, observation_space: gym.spaces.Box, action_space: gym.spaces.Space
    ) -> None:
        cfg, comm = ctx.cfg, ctx.comm
        self.cfg = cfg
        self.device = ctx.device
        self.observation_space, self.action_space = observation_space, action_space
        self.q_network = make_q_network(cfg, observation_space, action_space, ctx.device)
        self.networks = set_up_learner(comm, cfg.train.sharding, [self.q_network], [self.q_network])
        self.clock = ctx.clock
        sync = functools.partial(comm.sum_gradients_, clock=ctx.clock)
        self.algo = DQN(self.q_network, cfg.algo, sync, ctx.clock, *self.networks.copies)
        self.batch_share = batch_share(cfg, comm.rank, comm.world_size)

    def train_state(self) -> TrainState:
        return ModuleTrainState(
            self.algorithm,
            self.observation_space,
            self.action_space,
            {"q_network": self.q_network, "target_network": self.algo.target_network},
            {"q_network": self.algo.optimizer},
        )

    def deployable_policy(self) -> nn.Module:
        return greedy_policy(self.q_network)


class OffPolicyRunner(ReplayRunner, QLearningRunner):
    """Online DQN: epsilon-greedy collection into each rank's replay buffer."""

    exploration_metric = "epsilon"

    def __init__(self, ctx: RunContext) -> None:
        cfg = ctx.cfg
        rank_envs = start_rank_envs(ctx)
        if not isinstance(rank_envs.action_space, gym.spaces.Discrete):
            raise UserError(
                f"env {cfg.env.id!r}: dqn needs Discrete actions, not {rank_envs.action_space}; "
                "algo.name=ppo trains on it",
                code="algo-dqn-action-space",
            )
        QLearningRunner.__init__(self, ctx, rank_envs.observation_space, rank_envs.action_space)
        self.n_step = cfg.algo.n_step
        self.start_replay(ctx, rank_envs, {"q_network": self.q_network}, torch.int64)

    def exploration(self, global_step: int) -> float:
        """Epsilon: linear from ``exploration_initial_eps`` to ``exploration_final_eps`` over the
        first ``exploration_fraction`` of ``train.total_steps``."""
        cfg = self.cfg.algo
        progress = min(global_step / (cfg.exploration_fraction * self.cfg.train.total_steps), 1.0)
        return cfg.exploration_initial_eps + progress * (
            cfg.exploration_final_eps - cfg.exploration_initial_eps
        )
