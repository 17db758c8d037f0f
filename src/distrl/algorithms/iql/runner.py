"""IQL's runner: the logged-data loop (``runners.logged``) with IQL's value function, critics and
policy; the dataset's continuous action bounds scale the actions into the networks' [-1, 1]."""

from __future__ import annotations

import functools

import gymnasium as gym
from torch import nn

from distrl.algorithms.iql.networks import TanhMeanGaussianActor, ValueNetwork
from distrl.algorithms.iql.update import IQL
from distrl.errors import UserError
from distrl.io.train_state import ModuleTrainState, TrainState
from distrl.models.continuous import ActionScale, ScaledDeterministicActor, TwinQ
from distrl.runners.base import CountsGradientSteps, RunContext
from distrl.runners.learner import set_up_learner
from distrl.runners.logged import LoggedDataRunner


class IQLRunner(LoggedDataRunner, CountsGradientSteps):
    algorithm = "iql"

    def __init__(self, ctx: RunContext) -> None:
        cfg, comm, device = ctx.cfg, ctx.comm, ctx.device
        observation_space, action_space = self.open_logged_data(ctx)
        if not self.dataset.continuous:
            raise UserError(
                f"--data {cfg.data.path}: iql learns from continuous actions (a list of floats in the "
                "action column), not discrete ones; algo.name=dqn learns from these",
                code="algo-iql-discrete-data",
            )
        assert isinstance(action_space, gym.spaces.Box)
        self.observation_space, self.action_space = observation_space, action_space
        action_dim = int(action_space.shape[0])
        self.value = ValueNetwork(observation_space, cfg.model).to(device)
        self.critic = TwinQ(observation_space, action_dim, cfg.model).to(device)
        self.actor = TanhMeanGaussianActor(observation_space, action_dim, cfg.model).to(device)
        self.networks = set_up_learner(
            comm, cfg.train.sharding, [self.actor, self.value, self.critic], [self.critic]
        )
        sync = functools.partial(comm.sum_gradients_, clock=ctx.clock)
        scale = ActionScale(action_space).to(device)
        total_gradient_steps = -(-cfg.train.total_steps // cfg.algo.batch_size)
        self.algo = IQL(
            self.value,
            self.critic,
            self.actor,
            scale,
            cfg.algo,
            total_gradient_steps,
            sync,
            ctx.clock,
            *self.networks.copies,
        )
        self.start_stream(ctx)

    def train_state(self) -> TrainState:
        return ModuleTrainState(
            self.algorithm,
            self.observation_space,
            self.action_space,
            {
                "value": self.value,
                "critic": self.critic,
                "critic_target": self.algo.critic_target,
                "actor": self.actor,
            },
            self.algo.optimizers,
        )

    def deployable_policy(self) -> nn.Module:
        return ScaledDeterministicActor(self.actor, self.action_space)
