"""SAC's runner: the replay loop (``runners.replay``) with a squashed Gaussian actor acting,
uniformly random actions before ``learning_starts``, and SAC's update."""

from __future__ import annotations

from torch import nn

from distrl.algorithms.sac.networks import SquashedGaussianActor
from distrl.algorithms.sac.update import SAC
from distrl.algos.flat_gradients import GradientSync
from distrl.io.train_state import ModuleTrainState, TrainState
from distrl.models.continuous import ActionScale
from distrl.runners.base import RunContext
from distrl.runners.replay import ContinuousActorRunner


class SACRunner(ContinuousActorRunner):
    algorithm = "sac"
    actor_class = SquashedGaussianActor
    copied = ("critic",)  # the temperature, one number, stays whole

    def update_rule(
        self, ctx: RunContext, scale: ActionScale, sync: GradientSync, copies: list[nn.Module]
    ) -> SAC:
        (critic_target,) = copies
        return SAC(self.actor, self.critic, scale, ctx.cfg.algo, sync, ctx.clock, critic_target)

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
