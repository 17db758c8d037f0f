"""Soft actor-critic (Haarnoja et al. 2018; learned temperature from "Soft Actor-Critic
Algorithms and Applications"), in SB3's order within a gradient step: the temperature, then the
critics against the soft target, then the actor, then the Polyak target update.

The update is rank-agnostic: each of the three losses is a mean over this rank's share of the
global batch; its flat gradient is averaged over ranks, weighted by the shares, through the
``gradient_sync`` hook, so every rank takes the same three steps and the targets stay identical.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from distrl.algorithms.sac.config import SACConfig
from distrl.algorithms.sac.networks import SquashedGaussianActor
from distrl.algos.flat_gradients import GradientSync, SeparateNetworks, polyak_update_
from distrl.models.continuous import ActionScale, TwinQ
from distrl.storage.replay import TransitionBatch
from distrl.timing import PhaseClock


class Temperature(nn.Module):
    """SAC's alpha, learned as its logarithm (so it stays positive), or fixed."""

    def __init__(self, initial: float) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor([math.log(initial)]))

    def forward(self) -> torch.Tensor:
        return self.log_alpha.exp()


class SAC:
    def __init__(
        self,
        actor: SquashedGaussianActor,
        critic: TwinQ,
        scale: ActionScale,
        cfg: SACConfig,
        gradient_sync: GradientSync | None = None,
        clock: PhaseClock | None = None,
        critic_target: TwinQ | None = None,
    ) -> None:
        """``scale``: the env's action bounds (replay holds actions as the env took them);
        ``critic_target``: the critics' frozen copy, made by the caller (a sharded network cannot
        be copied: its copy is made whole and sharded alike), or here when None."""
        self.actor, self.critic, self.scale, self.cfg = actor, critic, scale, cfg
        self.critic_target = critic_target or copy.deepcopy(critic).requires_grad_(False)
        self.clock = clock or PhaseClock()
        self.learn_alpha = cfg.ent_coef == "auto"
        self.temperature = Temperature(1.0 if self.learn_alpha else float(cfg.ent_coef))
        self.temperature.requires_grad_(self.learn_alpha)
        self.target_entropy = -actor.action_dim if cfg.target_entropy == "auto" else float(cfg.target_entropy)
        trained = {
            "critic": critic,
            "actor": actor,
            **({"temperature": self.temperature} if self.learn_alpha else {}),
        }
        self.networks = SeparateNetworks(
            trained, cfg.learning_rate, cfg.adam_eps, cfg.max_grad_norm, gradient_sync, self.clock
        )
        self.optimizers = self.networks.optimizers
        self.set_learning_rate = self.networks.set_learning_rate
        self.gradient_steps_done = 0

    def gradient_step(
        self, batch: TransitionBatch, noise: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> dict[str, float]:
        """One synchronised step of each network on this rank's share of the global batch;
        ``noise``: the actor's standard normal draws for ``obs`` and ``next_obs`` (drawn here
        when not given)."""
        rows = len(batch)
        if noise is None:
            noise = tuple(torch.randn(rows, self.actor.action_dim, device=batch.obs.device) for _ in range(2))
        now_noise, next_noise = noise
        stats: dict[str, float] = {}
        with self.clock("forward"):
            actions_pi, log_prob_pi = self.actor.sample(batch.obs, now_noise)
            alpha = self.temperature().detach()
        if self.learn_alpha:
            with self.clock("forward"):
                alpha_loss = -(
                    self.temperature.log_alpha * (log_prob_pi.detach() + self.target_entropy)
                ).mean()
            stats["alpha_loss"] = float(alpha_loss.detach())
            stats["grad_norm/temperature"] = self.networks.step("temperature", alpha_loss, rows)
        with self.clock("forward"):
            critic_loss, q_mean = self.critic_loss(batch, next_noise, alpha)
        stats["critic_loss"], stats["q_mean"] = float(critic_loss.detach()), q_mean
        stats["grad_norm/critic"] = self.networks.step("critic", critic_loss, rows)
        with self.clock("forward"):
            q_pi = self.critic(batch.obs, actions_pi).min(dim=-1).values
            actor_loss = (alpha * log_prob_pi - q_pi).mean()
        stats["actor_loss"], stats["entropy"] = (
            float(actor_loss.detach()),
            float(-log_prob_pi.detach().mean()),
        )
        stats["grad_norm/actor"] = self.networks.step("actor", actor_loss, rows)
        stats["alpha"] = float(alpha)
        stats["skipped_steps"] = float(
            any(math.isnan(v) for k, v in stats.items() if k.startswith("grad_norm/"))
        )
        self.gradient_steps_done += 1
        if self.gradient_steps_done % self.cfg.target_update_interval == 0:
            polyak_update_(self.critic_target, self.critic, self.cfg.tau)
        return stats

    def critic_loss(
        self, batch: TransitionBatch, next_noise: torch.Tensor, alpha: torch.Tensor
    ) -> tuple[torch.Tensor, float]:
        """Half the summed squared errors of both critics against the soft target
        r + gamma (1 - terminated) (min Q_target(s', a') - alpha log pi(a'|s'))."""
        with torch.no_grad():
            next_actions, next_log_prob = self.actor.sample(batch.next_obs, next_noise)
            next_q = self.critic_target(batch.next_obs, next_actions).min(dim=-1).values
            soft_next = next_q - alpha * next_log_prob
            discount = self.cfg.gamma ** batch.steps.to(soft_next.dtype)
            target = batch.returns + discount * (~batch.terminated) * soft_next
        q = self.critic(batch.obs, self.scale.to_unit(batch.actions))
        loss = 0.5 * (F.mse_loss(q[:, 0], target) + F.mse_loss(q[:, 1], target))
        return loss, float(q.detach().mean())
