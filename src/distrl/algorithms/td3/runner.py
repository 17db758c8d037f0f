"""TD3's runner: distrl's replay loop (``runners.replay``) with TD3's actor acting, uniformly random
actions before ``learning_starts``, and TD3's update; sharded over the ranks with
``train.sharding``, as SAC is."""

from __future__ import annotations

import functools

import torch

from distrl.algorithms.td3.networks import DeterministicActor
from distrl.algorithms.td3.update import TD3
from distrl.comm.sharded import is_sharded
from distrl.io.train_state import ModuleTrainState, TrainState
from distrl.models.continuous import ActionScale, TwinQ
from distrl.models.encoders import has_images
from distrl.precision import low_precision
from distrl.runners.base import RunContext, continuous_action_envs, replicate_and_shard
from distrl.runners.replay import ContinuousActorRunner


class TD3Runner(ContinuousActorRunner):
    algorithm = "td3"

    def __init__(self, ctx: RunContext) -> None:
        cfg, comm, device = ctx.cfg, ctx.comm, ctx.device
        rank_envs = continuous_action_envs(ctx)
        observation_space, action_space = rank_envs.observation_space, rank_envs.action_space
        self.observation_space, self.action_space = observation_space, action_space
        self.actor = DeterministicActor(observation_space, action_space, cfg.model).to(device)
        self.critic = TwinQ(observation_space, self.actor.action_dim, cfg.model).to(device)
        networks = (self.actor, self.critic)
        dtype = low_precision(cfg.train.mixed_precision, device, has_images(observation_space))
        self.actor.low_precision = self.critic.low_precision = dtype  # their image encoders' autocast
        actor_target, critic_target = replicate_and_shard(ctx, networks, networks)
        self.sharded = is_sharded(self.actor.parameters())
        sync = functools.partial(comm.sum_gradients_, clock=ctx.clock)
        scale = ActionScale(action_space).to(device)
        self.algo = TD3(
            self.actor, self.critic, (actor_target, critic_target), scale, cfg.algo, sync, ctx.clock
        )
        self.start_replay(ctx, rank_envs, {"actor": self.actor}, torch.float32)

    def train_state(self) -> TrainState:
        """What a checkpoint holds, by name; ``actor`` is what ``td3_policy`` reads back."""
        return ModuleTrainState(
            self.algorithm,
            self.observation_space,
            self.action_space,
            {
                "actor": self.actor,
                "critic": self.critic,
                "actor_target": self.algo.actor_target,
                "critic_target": self.algo.critic_target,
            },
            self.algo.optimizers,
        )
