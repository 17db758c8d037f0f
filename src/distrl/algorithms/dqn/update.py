"""Deep Q-learning (Mnih et al. 2015) with a target network, double Q-learning (van Hasselt et al.
2016), n-step returns and, for learning from logged data, the conservative Q-learning regulariser
(Kumar et al. 2020, CQL(H) for discrete actions). With parametric actions (ReAgent) the network
scores each row's own candidates and every max, arg-max and logsumexp runs over real candidates.

The update is rank-agnostic: each gradient step's flat gradient is averaged over ranks, weighted
by each rank's share of the batch, through the ``gradient_sync`` hook, then clipped; every rank
applies the same step, and the target network, a copy of identical online networks, stays
identical too.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn.functional as F
from torch import nn

from distrl.algorithms.dqn.config import DQNConfig
from distrl.algos.flat_gradients import GradientSync, gradients_for, polyak_update_, set_learning_rate
from distrl.storage.replay import TransitionBatch
from distrl.timing import PhaseClock


class DQN:
    def __init__(
        self,
        q_network: nn.Module,
        cfg: DQNConfig,
        gradient_sync: GradientSync | None = None,
        clock: PhaseClock | None = None,
        target_network: nn.Module | None = None,
    ) -> None:
        """``q_network``: a ``QNetwork``, or a ``ParametricQNetwork`` for batches with candidates;
        ``target_network``: its frozen copy, made by the caller (a sharded network cannot be
        copied: its copy is made whole and sharded alike), or here when None."""
        self.q_network = q_network
        self.target_network = target_network or copy.deepcopy(q_network).requires_grad_(False)
        self.cfg = cfg
        self.gradient_sync = gradient_sync
        self.params = list(q_network.parameters())
        self.clock = clock or PhaseClock()
        """Where the update's phases are timed (the training loop's clock)."""
        self.grads = gradients_for(self.params, self.clock)
        self.optimizer = torch.optim.Adam(self.params, lr=cfg.learning_rate, eps=cfg.adam_eps, fused=True)
        self.gradient_steps_done = 0

    def set_learning_rate(self, lr: float) -> None:
        set_learning_rate([self.optimizer], lr)

    def gradient_step(self, batch: TransitionBatch) -> dict[str, float]:
        """One synchronised step on this rank's share of the global batch (which may be empty:
        the rank then joins the step with no samples); then, every ``target_update_interval``
        steps, the target update."""
        with self.clock("forward"):
            runs = len(batch) > 0 or self.grads.every_pass_is_collective
            loss, stats = self.loss(batch) if runs else (None, {})
        if not len(batch):
            stats = {}  # an empty batch's means are 0/0
        grad_norm = self.grads.step(
            loss, self.optimizer, self.gradient_sync, len(batch), self.cfg.max_grad_norm
        )
        stats["grad_norm"] = grad_norm
        stats["skipped_steps"] = float(math.isnan(grad_norm))
        self.gradient_steps_done += 1
        if self.gradient_steps_done % self.cfg.target_update_interval == 0:
            polyak_update_(self.target_network, self.q_network, self.cfg.tau)
        return stats

    def loss(self, batch: TransitionBatch) -> tuple[torch.Tensor, dict[str, float]]:
        """TD loss against the (double) n-step target, plus the CQL term when ``cql_alpha`` > 0;
        means over the local batch, so the sample-weighted cross-rank mean of gradients is the
        global-batch gradient."""
        cfg = self.cfg
        q_all = q_values(self.q_network, batch.obs, batch.candidates)
        q_taken = q_all.gather(-1, batch.actions.unsqueeze(-1)).squeeze(-1)
        with torch.no_grad():
            next_target = q_values(self.target_network, batch.next_obs, batch.next_candidates)
            mask = batch.next_action_mask
            if cfg.double_q:
                next_online = q_values(self.q_network, batch.next_obs, batch.next_candidates)
                if mask is not None:  # only actions possible in the next state compete
                    next_online = next_online.masked_fill(~mask, -torch.inf)
                next_actions = next_online.argmax(dim=-1, keepdim=True)
                next_value = next_target.gather(-1, next_actions).squeeze(-1)
            else:
                if mask is not None:
                    next_target = next_target.masked_fill(~mask, -torch.inf)
                next_value = next_target.max(dim=-1).values
            # A terminal row's value is never used; keep its -inf (no possible action) out of the sum.
            next_value = torch.where(batch.terminated, 0.0, next_value)
            discount = cfg.gamma ** batch.steps.to(next_value.dtype)
            target = batch.returns + discount * (~batch.terminated) * next_value
        td_loss = F.smooth_l1_loss(q_taken, target) if cfg.loss == "huber" else F.mse_loss(q_taken, target)
        loss = td_loss
        stats = {"td_loss": float(td_loss.detach()), "q_mean": float(q_taken.detach().mean())}
        if cfg.cql_alpha > 0:
            if batch.candidate_mask is not None:
                q_all = q_all.masked_fill(~batch.candidate_mask, -torch.inf)
            cql = (torch.logsumexp(q_all, dim=-1) - q_taken).mean()
            loss = loss + cfg.cql_alpha * cql
            stats["cql_loss"] = float(cql.detach())
        return loss, stats


def q_values(network: nn.Module, obs: torch.Tensor, candidates: torch.Tensor | None) -> torch.Tensor:
    """[batch, actions] from a discrete Q-network, or [batch, K] for the given candidates from a
    parametric one."""
    return network(obs) if candidates is None else network(obs, candidates)
