"""Asynchronous PPO (as RLlib's APPO): PPO's clipped surrogate on V-trace advantages, with a target
network as the "old" policy.

For a rollout acted by the policy ``mu`` (perhaps older weights, ``collect.lag``):

- V-trace (``vtrace``) gives value targets ``v`` and advantages ``A`` with importance ratios
  ``target / mu``, from the current value function (the value after the last step, and at a
  truncation, stays the acting copy's: the segment holds no later observation);
- PPO's ratio is RLlib's ``clip(mu / target, 0, max_importance_ratio) * pi / mu``, which is
  ``pi / target`` unless the acting policy was more than ``max_importance_ratio`` times likelier
  than the target network; the loss is ``-min(A r, A clip(r, 1 - eps, 1 + eps))``: PPO's loss with
  ``log mu - log clip(mu / target, 0, max_importance_ratio)`` as the old log-probabilities;
- the value loss is ``(V - v)^2 / 2``; the target network becomes a copy of the policy every
  ``target_update_every`` updates.

With no lag and the target network copied every update, ``target = mu``: every ratio is 1 and
the advantages are GAE(1)'s when ``gae_lambda`` is 1 (APPO's default).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch

from distrl.algorithms.appo.config import APPOConfig
from distrl.algorithms.appo.vtrace import vtrace
from distrl.algos.flat_gradients import polyak_update_
from distrl.algos.ppo import PPO
from distrl.models.actor_critic import ActorCritic
from distrl.storage.rollout import RolloutBatch, RolloutSegment


class APPO(PPO):
    cfg: APPOConfig
    policy_copies = ("target",)
    """The runner gives it a frozen copy of the policy as ``target`` (made before sharding)."""

    def __init__(
        self,
        policy: ActorCritic,
        cfg: APPOConfig,
        num_minibatches: int,
        target: ActorCritic | None = None,
        **kwargs: Any,
    ) -> None:
        """``target``: the policy's frozen copy, made by the caller (a sharded policy cannot be
        copied: its copy is made whole and sharded alike), or here when None."""
        super().__init__(policy, cfg, num_minibatches, **kwargs)
        self.target = copy.deepcopy(policy).requires_grad_(False) if target is None else target
        """The policy as of the last copy (every ``target_update_every`` updates)."""
        self.updates_done = 0
        """Updates since the target network's creation: times its copies (kept in checkpoints
        through the runner's state)."""

    def training_batch(self, rollout: RolloutSegment, sequence_length: int = 1) -> RolloutBatch:
        """The rollout as PPO's batch (chunks of ``sequence_length`` steps with memory): V-trace
        targets as returns and its advantages, the old log-probabilities that make PPO's ratio
        RLlib's, the current values."""
        cfg = self.cfg
        obs, actions = rollout.obs.flatten(0, 1), rollout.actions.flatten(0, 1)
        # With memory each env's segment is replayed whole from the state it was acted from.
        memory = {}
        if rollout.memory_states.shape[-1]:
            memory = {"start_states": rollout.memory_states[0], "dones": rollout.dones.flatten()}
        with torch.no_grad():
            log_probs, _, values = self.policy.action_stats(obs, actions, **memory)
            # Right after a copy the target network is the policy: one pass gives both.
            if self.updates_done % cfg.target_update_every:
                log_probs = self.target.action_stats(obs, actions, **memory)[0]
        target_log_probs, values = log_probs.view_as(rollout.values), values.view_as(rollout.values)
        log_rhos = target_log_probs - rollout.behaviour_log_probs
        targets, advantages = vtrace(
            rollout.rewards, values, rollout.dones, rollout.last_values, log_rhos, cfg.gamma,
            cfg.vtrace_rho_bar, cfg.vtrace_c_bar, cfg.gae_lambda,
        )  # fmt: skip
        # log mu - log min(mu / target, max): the target's, or mu's less log(max) where mu is
        # more than max times likelier (no gradient flows through the old log-probabilities).
        old_log_probs = torch.maximum(
            target_log_probs, rollout.behaviour_log_probs - math.log(cfg.max_importance_ratio)
        )
        return rollout.training_batch(advantages, targets, sequence_length, old_log_probs, values)

    def update(self, batch: RolloutBatch, sampler: Any = None) -> dict[str, float]:
        stats = super().update(batch, sampler)
        self.updates_done += 1
        if self.updates_done % self.cfg.target_update_every == 0:
            polyak_update_(self.target, self.policy, 1.0)
        return stats
