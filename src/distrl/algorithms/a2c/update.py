"""Advantage actor-critic (Mnih et al. 2016), synchronous, as SB3's A2C: one gradient step per
rollout on policy-gradient loss + value loss - entropy bonus, with RMSprop.

The update is rank-agnostic: the flat gradient of the local rollout's mean loss is averaged over
ranks, weighted by each rank's samples, through the ``gradient_sync`` hook (an all-reduce sum),
then the global norm is clipped; every rank applies the same step.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from distrl.algorithms.a2c.config import A2CConfig
from distrl.algos.flat_gradients import GradientSync, gradients_for, set_learning_rate
from distrl.models.actor_critic import ActorCritic
from distrl.storage.rollout import RolloutBatch
from distrl.timing import PhaseClock


class A2C:
    num_minibatches = 1
    steps_per_update = 1

    def __init__(
        self,
        policy: ActorCritic,
        cfg: A2CConfig,
        num_minibatches: int = 1,
        gradient_sync: GradientSync | None = None,
        clock: PhaseClock | None = None,
        compile_loss: bool = False,
    ) -> None:
        """The arguments ``OnPolicyRunner`` builds an update rule with; ``num_minibatches`` is
        always 1 and ``compile_loss`` never set (A2C honours no ``train.compile``)."""
        if num_minibatches != 1 or compile_loss:
            raise ValueError("A2C makes one uncompiled gradient step on the whole rollout")
        self.policy = policy
        self.cfg = cfg
        self.gradient_sync = gradient_sync
        self.clock = clock or PhaseClock()
        self.grads = gradients_for(list(policy.parameters()), self.clock)
        self.optimizer = torch.optim.RMSprop(
            policy.parameters(), lr=cfg.learning_rate, alpha=cfg.rms_prop_alpha, eps=cfg.rms_prop_eps
        )

    def set_learning_rate(self, lr: float) -> None:
        set_learning_rate([self.optimizer], lr)

    def update(self, batch: RolloutBatch) -> dict[str, float]:
        with self.clock("forward"):
            loss, terms = self.loss(batch)
            stats = {key: float(value) for key, value in terms.items()}
        grad_norm = self.grads.step(
            loss, self.optimizer, self.gradient_sync, len(batch), self.cfg.max_grad_norm
        )
        return {**stats, "grad_norm": grad_norm, "skipped_minibatches": float(math.isnan(grad_norm))}

    def loss(self, batch: RolloutBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """-advantage x log pi(a|s) + value_coef x (V(s) - return)^2 - entropy_coef x entropy,
        means over the local rollout (SB3's A2C: a squared error without a half)."""
        log_probs, entropy, values = self.policy.action_stats(
            batch.obs, batch.actions, batch.start_states(), batch.dones
        )
        policy_loss = -(batch.advantages * log_probs).mean()
        value_loss = F.mse_loss(values, batch.returns)
        entropy = entropy.mean()
        loss = policy_loss + self.cfg.value_coef * value_loss - self.cfg.entropy_coef * entropy
        return loss, {
            "policy_loss": policy_loss.detach(),
            "value_loss": value_loss.detach(),
            "entropy": entropy.detach(),
        }
