"""SAC's runner: the replay loop (``runners.replay``) with a squashed Gaussian actor acting,
uniformly random actions before ``learning_starts``, and SAC's update."""

from __future__ import annotations

import functools

import torch

from distrl.algos.sac import SAC
from distrl.comm.sharded import is_sharded
from distrl.io.train_state import ModuleTrainState, TrainState
from distrl.models.continuous import ActionScale, TwinQ
from distrl.models.encoders import has_images
from distrl.models.sac import SquashedGaussianActor
from distrl.precision import low_precision
from distrl.runners.base import RunContext, continuous_action_envs, replicate_and_shard
from distrl.runners.replay import ContinuousActorRunner


class SACRunner(ContinuousActorRunner):
    algorithm = "sac"

    def __init__(self, ctx: RunContext) -> None:
        cfg, comm, device = ctx.cfg, ctx.comm, ctx.device
        rank_envs = continuous_action_envs(ctx)
        observation_space, action_space = rank_envs.observation_space, rank_envs.action_space
        self.observation_space, self.action_space = observation_space, action_space
        self.actor = SquashedGaussianActor(observation_space, action_space, cfg.model).to(device)
        self.critic = TwinQ(observation_space, self.actor.action_dim, cfg.model).to(device)
        dtype = low_precision(cfg.train.mixed_precision, device, has_images(observation_space))
        self.actor.low_precision = self.critic.low_precision = dtype  # their image encoders' autocast
        # The temperature, one number, stays whole.
        (critic_target,) = replicate_and_shard(ctx, (self.actor, self.critic), (self.critic,))
        self.sharded = is_sharded(self.actor.parameters())
        sync = functools.partial(comm.sum_gradients_, clock=ctx.clock)
        scale = ActionScale(action_space).to(device)
        self.algo = SAC(self.actor, self.critic, scale, cfg.algo, sync, ctx.clock, critic_target)
        self.start_replay(ctx, rank_envs, {"actor": self.actor}, torch.float32)

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
