"""SAC's runner: the replay loop (``runners.replay``) with a squashed Gaussian actor acting,
uniformly random actions before ``learning_starts``, and SAC's update."""

from __future__ import annotations

import copy
import functools
from contextlib import AbstractContextManager

import gymnasium as gym
import torch
from torch import nn

from distrl.algos.sac import SAC
from distrl.comm.sharded import gathered, is_sharded
from distrl.errors import UserError
from distrl.io.train_state import ModuleTrainState, TrainState
from distrl.models.encoders import has_images
from distrl.models.sac import ActionScale, ScaledDeterministicActor, SquashedGaussianActor, TwinQ
from distrl.precision import low_precision
from distrl.runners.base import CountsGradientSteps, RunContext, start_rank_envs
from distrl.runners.replay import ReplayRunner


class SACRunner(CountsGradientSteps, ReplayRunner):
    algorithm = "sac"
    exploration_metric = "random_actions"

    def __init__(self, ctx: RunContext) -> None:
        cfg, comm, device = ctx.cfg, ctx.comm, ctx.device
        if cfg.normalize.observations or cfg.normalize.rewards:
            raise UserError(
                "normalize.observations and normalize.rewards are PPO's: set them false for sac",
                code="algo-normalize-ppo-only",
            )
        rank_envs = start_rank_envs(ctx)
        observation_space, action_space = rank_envs.observation_space, rank_envs.action_space
        if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1:
            raise UserError(
                f"env {cfg.env.id!r}: sac needs a Box of continuous actions, not {action_space}; "
                "algo.name=dqn or ppo trains on it",
                code="algo-sac-action-space",
            )
        self.observation_space, self.action_space = observation_space, action_space
        self.actor = SquashedGaussianActor(observation_space, action_space, cfg.model).to(device)
        self.critic = TwinQ(observation_space, self.actor.action_dim, cfg.model).to(device)
        for network in (self.actor, self.critic):
            network.low_precision = low_precision(
                cfg.train.mixed_precision, device, has_images(observation_space)
            )
            comm.broadcast_parameters_(network)
        critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        for network in (self.actor, self.critic, critic_target):  # the temperature stays whole
            comm.shard_(network, cfg.train.sharding)
        self.sharded = is_sharded(self.actor.parameters())
        sync = functools.partial(comm.sum_gradients_, clock=ctx.clock)
        scale = ActionScale(action_space).to(device)
        self.algo = SAC(self.actor, self.critic, scale, cfg.algo, sync, ctx.clock, critic_target)
        self.start_replay(ctx, rank_envs, {"actor": self.actor}, torch.float32)

    def exploration(self, global_step: int) -> float:
        """1 (uniformly random actions) until ``learning_starts`` global env steps, then 0."""
        return 1.0 if global_step < self.cfg.algo.learning_starts else 0.0

    def train_state(self) -> TrainState:
        return ModuleTrainState(
            self.algorithm,
            self.observation_space,
            self.action_space,
            {
                "actor": self.actor,
                "critic": self.critic,
                "critic_target": self.algo.critic_target,
                "temperature": self.algo.temperature,
            },
            self.algo.optimizers,
        )

    def deployable_policy(self) -> nn.Module:
        return ScaledDeterministicActor(self.actor, self.action_space)

    def whole_weights(self) -> AbstractContextManager[None]:
        return gathered(self.actor)
