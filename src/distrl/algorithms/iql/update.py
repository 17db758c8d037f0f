"""Implicit Q-learning (Kostrikov et al. 2021), in the order of the authors' implementation
within a gradient step: the value function, then the policy (with the new value), then the
critics (against the new value), then the Polyak target update.

- value: the ``expectile`` of min Q_target(s, a) over the data's actions a, by asymmetric least
  squares |tau - 1(u < 0)| u^2 with u = min Q_target(s, a) - V(s);
- critics: squared error of each Q(s, a) against r + gamma (1 - terminated) V(s'): no action
  outside the data is ever evaluated;
- policy: advantage-weighted regression, -min(exp(beta (min Q_target(s, a) - V(s))), max_weight)
  log pi(a | s); with ``actor_cosine_decay`` its learning rate follows the authors' cosine to zero
  over the run's gradient steps.

The update is rank-agnostic: each loss is a mean over this rank's share of the global batch; its
flat gradient is averaged over ranks, weighted by the shares, through the ``gradient_sync`` hook,
so every rank takes the same steps and the targets stay identical.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F

from distrl.algorithms.iql.config import IQLConfig
from distrl.algorithms.iql.networks import TanhMeanGaussianActor, ValueNetwork
from distrl.algos.flat_gradients import GradientSync, SeparateNetworks, polyak_update_, set_learning_rate
from distrl.models.continuous import ActionScale, TwinQ
from distrl.storage.replay import TransitionBatch
from distrl.timing import PhaseClock


class IQL:
    def __init__(
        self,
        value: ValueNetwork,
        critic: TwinQ,
        actor: TanhMeanGaussianActor,
        scale: ActionScale,
        cfg: IQLConfig,
        total_gradient_steps: int,
        gradient_sync: GradientSync | None = None,
        clock: PhaseClock | None = None,
        critic_target: TwinQ | None = None,
    ) -> None:
        """``scale``: the data's action bounds (batches hold actions as they were logged);
        ``total_gradient_steps``: the run's budget in gradient steps (the actor's cosine spans it);
        ``critic_target``: the critics' frozen copy, made by the caller (a sharded network cannot
        be copied: its copy is made whole and sharded alike), or here when None."""
        self.value, self.critic, self.actor, self.scale, self.cfg = value, critic, actor, scale, cfg
        self.total_gradient_steps = total_gradient_steps
        self.critic_target = critic_target or copy.deepcopy(critic).requires_grad_(False)
        self.clock = clock or PhaseClock()
        self.networks = SeparateNetworks(
            {"value": value, "actor": actor, "critic": critic},
            cfg.learning_rate, cfg.adam_eps, cfg.max_grad_norm, gradient_sync, self.clock,
        )  # fmt: skip
        self.optimizers = self.networks.optimizers
        self.learning_rate = cfg.learning_rate
        self.gradient_steps_done = 0

    def set_learning_rate(self, lr: float) -> None:
        """Every network's learning rate (the actor's cosine, if any, scales it)."""
        self.learning_rate = lr
        self.networks.set_learning_rate(lr)

    def actor_learning_rate(self) -> float:
        if not self.cfg.actor_cosine_decay:
            return self.learning_rate
        progress = min(self.gradient_steps_done / self.total_gradient_steps, 1.0)
        return self.learning_rate * 0.5 * (1.0 + math.cos(math.pi * progress))

    def gradient_step(self, batch: TransitionBatch) -> dict[str, float]:
        """One synchronised step of each network on this rank's share of the global batch (which
        may be empty: the rank then joins each step with no samples); then the target update."""
        set_learning_rate([self.optimizers["actor"]], self.actor_learning_rate())
        if len(batch):
            stats = self._losses_and_steps(batch)
        else:
            stats = {f"grad_norm/{name}": self.networks.step(name, None, 0) for name in self.optimizers}
        stats["skipped_steps"] = float(
            any(math.isnan(v) for k, v in stats.items() if k.startswith("grad_norm/"))
        )
        self.gradient_steps_done += 1
        polyak_update_(self.critic_target, self.critic, self.cfg.tau)
        return stats

    def _losses_and_steps(self, batch: TransitionBatch) -> dict[str, float]:
        rows, cfg = len(batch), self.cfg
        actions = self.scale.to_unit(batch.actions)
        stats: dict[str, float] = {}
        with self.clock("forward"), torch.no_grad():
            target_q = self.critic_target(batch.obs, actions).min(dim=-1).values
        with self.clock("forward"):
            value = self.value(batch.obs)
            difference = target_q - value
            weight = torch.abs(cfg.expectile - (difference < 0).to(difference.dtype))
            value_loss = (weight * difference.pow(2)).mean()
        stats["value_loss"], stats["v_mean"] = float(value_loss.detach()), float(value.detach().mean())
        stats["grad_norm/value"] = self.networks.step("value", value_loss, rows)
        with self.clock("forward"):
            with torch.no_grad():
                advantage = target_q - self.value(batch.obs)
                unclipped = torch.exp(cfg.temperature * advantage)
                policy_weight = unclipped.clamp(max=cfg.max_weight)
            actor_loss = -(policy_weight * self.actor.log_prob(batch.obs, actions)).mean()
        stats["actor_loss"], stats["policy_weight"] = float(actor_loss.detach()), float(policy_weight.mean())
        # What a diverging run shows first: advantages that grow, weights that pile up at the cap.
        stats["advantage_mean"], stats["advantage_max"] = float(advantage.mean()), float(advantage.max())
        stats["policy_weight_clipped"] = float((unclipped > cfg.max_weight).to(advantage.dtype).mean())
        stats["grad_norm/actor"] = self.networks.step("actor", actor_loss, rows)
        with self.clock("forward"):
            with torch.no_grad():
                discount = cfg.gamma ** batch.steps.to(target_q.dtype)
                target = batch.returns + discount * (~batch.terminated) * self.value(batch.next_obs)
            q = self.critic(batch.obs, actions)
            critic_loss = F.mse_loss(q[:, 0], target) + F.mse_loss(q[:, 1], target)
        stats["critic_loss"], stats["q_mean"] = float(critic_loss.detach()), float(q.detach().mean())
        stats["grad_norm/critic"] = self.networks.step("critic", critic_loss, rows)
        return stats
