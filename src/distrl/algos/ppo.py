"""Proximal Policy Optimization (Schulman et al. 2017), clipped-surrogate variant.

The update is rank-agnostic: after each minibatch's backward pass the flat gradient is averaged
over ranks, weighted by minibatch size, through the ``gradient_sync`` hook (an all-reduce sum in
DD-PPO, nothing in one process), and then the global gradient norm is clipped, so every rank
applies the same averaged gradient.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

import torch

from distrl.algos.flat_gradients import GradientSync, gradients_for, set_learning_rate
from distrl.algos.ppo_config import PPOConfig
from distrl.compile import compiled_if
from distrl.models.actor_critic import ActorCritic
from distrl.storage.rollout import RolloutBatch
from distrl.timing import PhaseClock

MinibatchSampler = Callable[[int], list[torch.Tensor]]
"""Given the batch's number of chunks (its samples, without memory), return one epoch's
minibatches as chunk index tensors."""


class OnPolicyUpdate(Protocol):
    """What ``runners.on_policy.OnPolicyRunner`` asks of an on-policy actor-critic's update. One
    with returns of its own also makes the update's batch from the rollout,
    ``training_batch(rollout, sequence_length)`` (APPO's V-trace); without it the runner's is
    GAE's."""

    num_minibatches: int
    """Parts each rank splits its rollout into per pass (its collection must reach one sample
    for each)."""
    optimizer: torch.optim.Optimizer

    @property
    def steps_per_update(self) -> int:
        """Optimiser steps in one ``update``: counted as skipped when a rollout is thrown away."""

    def set_learning_rate(self, lr: float) -> None: ...

    def update(self, batch: RolloutBatch) -> dict[str, float]:
        """Gradient steps on the rollout (advantages ready); mean loss statistics and
        ``skipped_minibatches``."""


class PPO:
    def __init__(
        self,
        policy: ActorCritic,
        cfg: PPOConfig,
        num_minibatches: int,
        gradient_sync: GradientSync | None = None,
        clock: PhaseClock | None = None,
        generator: torch.Generator | None = None,
        compile_loss: bool = False,
    ) -> None:
        """``num_minibatches``: parts each epoch splits the local rollout into
        (``PPOConfig.minibatches_per_epoch``);
        ``compile_loss``: run the loss and its backward pass through ``torch.compile`` (fused kernels)."""
        self.policy = policy
        self.cfg = cfg
        self.num_minibatches = num_minibatches
        self.gradient_sync = gradient_sync
        self.generator = generator
        self.params = list(policy.parameters())
        self.clock = clock or PhaseClock()
        """Where the update's phases are timed (the training loop's clock)."""
        self.grads = gradients_for(self.params, self.clock)
        # The fused kernel is several times faster than the per-tensor loop for small networks.
        self.optimizer = torch.optim.Adam(self.params, lr=cfg.learning_rate, eps=cfg.adam_eps, fused=True)
        self.loss_terms = compiled_if(compile_loss, self.loss, self.params[0].device)

    @property
    def steps_per_update(self) -> int:
        return self.cfg.update_epochs * self.num_minibatches

    def set_learning_rate(self, lr: float) -> None:
        set_learning_rate([self.optimizer], lr)

    def random_minibatches(self, num_chunks: int) -> list[torch.Tensor]:
        """Whole chunks, shuffled: a recurrent update never splits the steps it replays."""
        perm = torch.randperm(num_chunks, generator=self.generator)
        # Always num_minibatches parts (chunk() may return fewer): every rank must make the same
        # number of gradient syncs even when a cut-short rollout left it fewer samples.
        return list(perm.tensor_split(self.num_minibatches))

    def update(self, batch: RolloutBatch, sampler: MinibatchSampler | None = None) -> dict[str, float]:
        """Run ``update_epochs`` passes of minibatch gradient steps; return mean loss statistics."""
        sampler = sampler or self.random_minibatches
        totals: dict[str, float] = {"skipped_minibatches": 0.0}
        steps = 0
        for _ in range(self.cfg.update_epochs):
            for idx in sampler(batch.num_chunks):
                stats = self.minibatch_step(batch.chunks(idx))
                for key, value in stats.items():
                    totals[key] = totals.get(key, 0.0) + value
                steps += 1
        skipped = totals.pop("skipped_minibatches")
        return {"skipped_minibatches": skipped, **{k: v / steps for k, v in totals.items()}}

    def minibatch_step(self, mb: RolloutBatch) -> dict[str, float]:
        with self.clock("forward"):
            loss, terms = self.loss_terms(mb)
            stats = {key: float(value) for key, value in terms.items()}
        grad_norm = self.grads.step(loss, self.optimizer, self.gradient_sync, len(mb), self.cfg.max_grad_norm)
        stats["grad_norm"] = grad_norm
        stats["skipped_minibatches"] = float(math.isnan(grad_norm))
        return stats

    def loss(self, mb: RolloutBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Clipped surrogate + (optionally clipped) value loss - entropy bonus, all means over
        the local minibatch (so the cross-rank mean of gradients is the global-batch gradient),
        and its terms as detached scalars (no host sync, so ``torch.compile`` sees one graph)."""
        cfg = self.cfg
        new_log_probs, entropy, values = self.policy.action_stats(
            mb.obs, mb.actions, mb.start_states(), mb.dones
        )
        entropy = entropy.mean()
        log_ratio = new_log_probs - mb.behaviour_log_probs
        ratio = log_ratio.exp()

        surrogate = mb.advantages * ratio
        clipped = mb.advantages * torch.clamp(ratio, 1.0 - cfg.clip_coef, 1.0 + cfg.clip_coef)
        policy_loss = -torch.min(surrogate, clipped).mean()

        value_error = (values - mb.returns) ** 2
        if cfg.clip_value_loss:
            clipped_values = mb.values + torch.clamp(values - mb.values, -cfg.clip_coef, cfg.clip_coef)
            value_error = torch.max(value_error, (clipped_values - mb.returns) ** 2)
        value_loss = 0.5 * value_error.mean()

        loss = policy_loss + cfg.value_coef * value_loss - cfg.entropy_coef * entropy
        with torch.no_grad():
            approx_kl = ((ratio - 1.0) - log_ratio).mean()
            clip_fraction = ((ratio - 1.0).abs() > cfg.clip_coef).float().mean()
        return loss, {
            "policy_loss": policy_loss.detach(),
            "value_loss": value_loss.detach(),
            "entropy": entropy.detach(),
            "approx_kl": approx_kl,
            "clip_fraction": clip_fraction,
        }
