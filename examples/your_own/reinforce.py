"""REINFORCE with a learned baseline (Williams 1992) as a distrl plug-in: distrl's on-policy loop
(``OnPolicyRunner``: PPO's actor-critic, collection and returns) with an update of its own, one
Adam step per rollout. ``algo.name: reinforce:ALGORITHM``, run from this folder; no distrl file
is edited."""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from pydantic import PositiveFloat

from distrl.algos.flat_gradients import FlatGradients, GradientSync
from distrl.algos.on_policy_config import OnPolicySection
from distrl.algos.registry import ENVS, Algorithm
from distrl.models.actor_critic import ActorCritic
from distrl.runners.on_policy import OnPolicyRunner
from distrl.storage.rollout import RolloutBatch
from distrl.timing import PhaseClock


class ReinforceConfig(OnPolicySection):
    """The rollout, gamma, ``max_grad_norm`` and advantage normalisation come from
    ``OnPolicySection``; the returns are Monte Carlo within the rollout (GAE with lambda 1)."""

    phases: ClassVar[tuple[str, ...]] = ("returns", "baseline")  # the loop's "returns" and ours

    gae_lambda: float = 1.0
    """GAE's lambda: 1 makes the advantage the rollout's discounted return minus the baseline."""
    learning_rate: PositiveFloat = 1e-3
    """Adam's learning rate."""
    anneal_lr: bool = False

    def minibatches_per_epoch(self, global_batch: int) -> int:
        return 1  # one step on the whole rollout


class Reinforce:
    """Built by ``OnPolicyRunner`` as ``Reinforce(policy, cfg, num_minibatches=, gradient_sync=,
    clock=, compile_loss=)``; the policy's value head is the baseline."""

    num_minibatches = 1
    steps_per_update = 1  # counted as skipped when the runner throws a rollout away

    def __init__(
        self,
        policy: ActorCritic,
        cfg: ReinforceConfig,
        num_minibatches: int,
        gradient_sync: GradientSync,
        clock: PhaseClock,
        compile_loss: bool,
    ) -> None:
        self.policy, self.cfg, self.sync, self.clock = policy, cfg, gradient_sync, clock
        self.grads = FlatGradients(list(policy.parameters()), clock)  # one buffer, one all-reduce
        self.optimizer = torch.optim.Adam(policy.parameters(), lr=cfg.learning_rate)

    def set_learning_rate(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def update(self, batch: RolloutBatch) -> dict[str, float]:
        with self.clock("baseline"):
            log_probs, _, values = self.policy.action_stats(batch.obs, batch.actions)
            # -(G - b(s)) log pi(a|s): the advantage is G - b(s), computed by the runner.
            reinforce = -(batch.advantages * log_probs).mean()
            baseline = ((values - batch.returns) ** 2).mean()  # b(s) regressed on G
        # Backward, the average over ranks weighted by their samples (gradient_sync), clip, Adam.
        loss, samples = reinforce + baseline, len(batch)
        norm = self.grads.step(loss, self.optimizer, self.sync, samples, self.cfg.max_grad_norm)
        return {
            "reinforce_loss": float(reinforce.detach()),
            "baseline_loss": float(baseline.detach()),
            "skipped_minibatches": float(math.isnan(norm)),  # NaN: every rank skipped the step
        }


class ReinforceRunner(OnPolicyRunner):
    algorithm = "reinforce"
    update_rule = Reinforce


ALGORITHM = Algorithm(
    "reinforce",
    ReinforceConfig,
    deployable_policy="distrl.models.policies:ppo_policy",  # PPO's actor-critic, so PPO's policy
    runners={ENVS: f"{__name__}:ReinforceRunner"},
    collector="distrl.collect.rollout:actor_critic_collector",  # PPO's collection
    acting="distrl.collect.rollout:actor_critic_copies",
)
