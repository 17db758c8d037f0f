"""TD3's runner: distrl's replay loop (``runners.replay``) with TD3's actor acting, uniformly random
actions before ``learning_starts``, and TD3's update; sharded over the ranks with
``train.sharding``, as SAC is."""

from __future__ import annotations

from torch import nn

from distrl.algorithms.td3.networks import DeterministicActor
from distrl.algorithms.td3.update import TD3
from distrl.algos.flat_gradients import GradientSync
from distrl.io.train_state import ModuleTrainState, TrainState
from distrl.models.continuous import ActionScale
from distrl.runners.base import RunContext
from distrl.runners.replay import ContinuousActorRunner


class TD3Runner(ContinuousActorRunner):
    algorithm = "td3"
    actor_class = DeterministicActor
    copied = ("actor", "critic")

    def update_rule(
        self, ctx: RunContext, scale: ActionScale, sync: GradientSync, copies: list[nn.Module]
    ) -> TD3:
        actor_target, critic_target = copies
        return TD3(
            self.actor, self.critic, (actor_target, critic_target), scale, ctx.cfg.algo, sync, ctx.clock
        )

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
