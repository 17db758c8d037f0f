"""TD3's gradient step, line by line against the paper's Algorithm 1 (and SB3's ``TD3.train``):
the twin critics every step, the actor and both targets every ``policy_delay`` steps.

Rank-agnostic: each loss is a mean over this rank's share of the global batch; its flat gradient
is averaged over the ranks, weighted by the shares, through the ``gradient_sync`` hook, so every
rank takes the same steps and its targets stay identical."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from distrl.algorithms.td3.config import TD3Config
from distrl.algorithms.td3.networks import DeterministicActor
from distrl.algos.flat_gradients import GradientSync, SeparateNetworks, polyak_update_
from distrl.models.continuous import ActionScale, TwinQ
from distrl.storage.replay import TransitionBatch
from distrl.timing import PhaseClock


class TD3:
    def __init__(
        self,
        actor: DeterministicActor,
        critic: TwinQ,
        targets: tuple[DeterministicActor, TwinQ],
        scale: ActionScale,
        cfg: TD3Config,
        gradient_sync: GradientSync,
        clock: PhaseClock,
    ) -> None:
        """``targets``: frozen copies of ``actor`` and ``critic``, made by the caller before any
        sharding (a sharded network cannot be copied); ``scale``: the env's bounds (replay holds
        actions as the env took them)."""
        self.actor, self.critic, self.scale, self.cfg, self.clock = actor, critic, scale, cfg, clock
        self.actor_target, self.critic_target = targets
        self.networks = SeparateNetworks(
            {"critic": critic, "actor": actor},
            cfg.learning_rate,
            cfg.adam_eps,
            cfg.max_grad_norm,
            gradient_sync,
            clock,
        )
        self.optimizers = self.networks.optimizers
        self.set_learning_rate = self.networks.set_learning_rate
        self.gradient_steps_done = 0
        self.actor_stats = {"actor_loss": 0.0, "grad_norm/actor": 0.0}
        """The newest actor step's statistics: every step reports them (rows keep one set of keys)."""

    def gradient_step(
        self, batch: TransitionBatch, target_noise: torch.Tensor | None = None
    ) -> dict[str, float]:
        """One synchronised critic step on this rank's share of the global batch, and every
        ``policy_delay``-th call an actor step and both targets' Polyak step; ``target_noise``:
        the standard normal draws smoothing the target actions (drawn here when not given)."""
        rows, cfg = len(batch), self.cfg
        self.gradient_steps_done += 1
        with self.clock("forward"):
            with torch.no_grad():
                # Target policy smoothing: a~ = clip(mu'(s') + clip(N(0, sigma~), -c, c), -1, 1).
                next_actions = self.actor_target(batch.next_obs)
                if target_noise is None:
                    target_noise = torch.randn_like(next_actions)
                noise = (target_noise * cfg.target_policy_noise).clamp(
                    -cfg.target_noise_clip, cfg.target_noise_clip
                )
                next_actions = (next_actions + noise).clamp(-1.0, 1.0)
                # Clipped double Q: y = r + gamma^n (1 - terminated) min_i Q'_i(s', a~).
                next_q = self.critic_target(batch.next_obs, next_actions).min(dim=-1).values
                discount = cfg.gamma ** batch.steps.to(next_q.dtype)
                y = batch.returns + discount * (~batch.terminated) * next_q
            # Both critics regress on y: sum_i mean (y - Q_i(s, a))^2 (SB3's sum of the two).
            q = self.critic(batch.obs, self.scale.to_unit(batch.actions))
            critic_loss = F.mse_loss(q[:, 0], y) + F.mse_loss(q[:, 1], y)
        stats = {"critic_loss": float(critic_loss.detach()), "q_mean": float(q.detach().mean())}
        stats["grad_norm/critic"] = self.networks.step("critic", critic_loss, rows)
        if self.gradient_steps_done % cfg.policy_delay == 0:
            with self.clock("forward"):
                # The deterministic policy gradient through the first critic: ascend Q_1(s, mu(s)).
                actor_loss = -self.critic(batch.obs, self.actor(batch.obs))[:, 0].mean()
            actor_norm = self.networks.step("actor", actor_loss, rows)
            self.actor_stats = {"actor_loss": float(actor_loss.detach()), "grad_norm/actor": actor_norm}
            stats["skipped_steps"] = float(math.isnan(actor_norm))
            # theta' <- tau theta + (1 - tau) theta', for both targets, only at the delayed step.
            polyak_update_(self.critic_target, self.critic, cfg.tau)
            polyak_update_(self.actor_target, self.actor, cfg.tau)
        # A non-finite gradient on any rank made every rank skip that step (a NaN norm).
        skipped = math.isnan(stats["grad_norm/critic"]) or bool(stats.pop("skipped_steps", 0.0))
        return {**stats, **self.actor_stats, "skipped_steps": float(skipped)}
