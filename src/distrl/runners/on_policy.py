"""DD-PPO's runner: every rank collects with its own envs and policy copy (or, in Ray mode, has
env workers collect for it), gradients are averaged across ranks, and after each update all
ranks hold identical parameters.

``iteration()`` reads as the algorithm: collect -> compute returns -> update; the shared loop
(``distrl.runners.loop``) logs, checks stop rules and checkpoints around it.
"""

from __future__ import annotations

import functools
import math
import time
from typing import TYPE_CHECKING

import torch
from torch import nn

from distrl.algos.ppo import PPO, OnPolicyUpdate
from distrl.collect.base import Collector, CollectRequest
from distrl.collect.rollout import finite
from distrl.errors import UserError
from distrl.io.train_state import ModuleTrainState, TrainState
from distrl.models.actor_critic import deployable_actor
from distrl.models.normalizer import batch_moments
from distrl.models.policies import acting_modules, ppo_actor_critic, ppo_normalizers
from distrl.runners.base import (
    IterationResult,
    RunContext,
    Runner,
    check_update_rule,
    rank_collector,
    scheduled_learning_rate,
    skipped_count,
    start_rank_envs,
)
from distrl.runners.episodes import EpisodeTracker
from distrl.runners.learner import set_up_learner
from distrl.runners.straggler import StragglerCutoff
from distrl.sharding import EnvShard
from distrl.storage.rollout import RolloutBatch, RolloutSegment

if TYPE_CHECKING:
    from distrl.config.run import RunConfig


def advantage_sums(advantages: torch.Tensor) -> list[float]:
    """(count, sum, sum of squares) in float64: summed over ranks, they give the global mean and
    variance in the same collective as the update's other per-rank numbers."""
    adv = advantages.double()
    return [float(adv.numel()), float(adv.sum()), float((adv * adv).sum())]


def normalize_advantages(
    advantages: torch.Tensor, count: float, total: float, total_sq: float
) -> torch.Tensor:
    """Standardise with the mean/std of the whole global rollout (from the summed
    ``advantage_sums``), so N ranks match one batch. One-pass float64 moments lose precision
    only when |mean| / std nears 1e8, far from what GAE advantages do."""
    mean = total / count
    std = math.sqrt(max(total_sq - count * mean * mean, 0.0) / max(count - 1.0, 1.0))
    return ((advantages - mean) / (std + 1e-8)).reshape(-1)


def minibatches_per_rank(cfg: RunConfig, envs: EnvShard, world_size: int, sequence_length: int = 1) -> int:
    """Parts each rank splits its rollout into per epoch, by the size rule (docs/concepts/sizes.md,
    "The PPO minibatch rule"): the global minibatch stays ``minibatch_size`` samples however many
    ranks there are, so each rank's share of a minibatch shrinks as ranks grow. A part is whole chunks of
    ``sequence_length`` steps (single samples without memory)."""
    rollout = cfg.algo.rollout_steps
    count = cfg.algo.minibatches_per_epoch(rollout * envs.global_count)
    smallest_rank_chunks = rollout // sequence_length * envs.min_count
    if count > smallest_rank_chunks:
        unit = "samples" if sequence_length == 1 else f"chunks of algo.bptt_len={sequence_length} steps"
        raise UserError(
            f"algo.minibatch_size={cfg.algo.minibatch_size} gives {count} minibatches per epoch, "
            f"more than the {smallest_rank_chunks} {unit} a rank collects per update; raise it to at "
            f"least {world_size * sequence_length}"
            + ("" if sequence_length == 1 else " or lower algo.bptt_len"),
            code="algo-minibatches-too-many",
        )
    return count


class OnPolicyRunner(Runner):
    """Collect a rollout, compute returns, update with ``update_rule``: PPO here; another
    on-policy actor-critic (A2C) is a subclass naming its own rule."""

    algorithm = "ppo"
    update_rule: type[OnPolicyUpdate] = PPO
    """Built as ``update_rule(policy, cfg.algo, num_minibatches=, gradient_sync=, clock=,
    compile_loss=)``, and given a frozen copy of the policy by each name in its
    ``policy_copies`` (APPO's ``target``), made before sharding."""

    def __init__(self, ctx: RunContext) -> None:
        cfg, comm, device = ctx.cfg, ctx.comm, ctx.device
        self.cfg = cfg
        self.comm = comm
        self.clock = ctx.clock
        self.device = device
        rank_envs = start_rank_envs(ctx)
        self.envs = rank_envs.shard
        self.num_envs = self.envs.count
        self.full_rollout = cfg.algo.rollout_steps * self.envs.global_count
        """The env steps of an uncut rollout over all ranks."""
        if cfg.train.straggler_threshold is None:  # else a cut rollout collects fewer
            self.steps_per_iteration = self.full_rollout
        self.observation_space, self.action_space = rank_envs.observation_space, rank_envs.action_space
        self.policy = ppo_actor_critic(cfg, self.observation_space, self.action_space, device)
        self.sequence_length = cfg.algo.sequence_length(memory=self.policy.memory is not None)
        if self.policy.memory is not None and cfg.train.straggler_threshold is not None:
            raise UserError(
                f"train.straggler_threshold={cfg.train.straggler_threshold} with model.memory="
                f"{cfg.model.memory}: a cut rollout would split the update's chunks; unset one of them",
                code="algo-straggler-with-memory",
            )
        copies = getattr(self.update_rule, "policy_copies", ())
        self.networks = set_up_learner(comm, cfg.train.sharding, [self.policy], [self.policy] * len(copies))
        self.obs_rms, self.return_rms = ppo_normalizers(
            cfg, self.observation_space, self.action_space, device
        )
        self.algo = self.update_rule(
            self.policy,
            cfg.algo,
            num_minibatches=minibatches_per_rank(cfg, self.envs, comm.world_size, self.sequence_length),
            gradient_sync=functools.partial(comm.sum_gradients_, clock=ctx.clock),
            clock=ctx.clock,
            compile_loss=cfg.train.compile,
            **dict(zip(copies, self.networks.copies, strict=True)),
        )
        check_update_rule(self.algo, OnPolicyUpdate)
        acting = acting_modules(self.policy, self.obs_rms, self.return_rms)
        self.collection: Collector[RolloutSegment] = rank_collector(ctx, rank_envs, acting)
        self.policy_version = 0
        """Updates in this launch: the version of the weights the next rollout acts with."""
        self.episodes = EpisodeTracker(self.num_envs, cfg.train.return_window, device)
        self.stragglers = StragglerCutoff(
            comm,
            cfg.train.straggler_threshold,
            cfg.algo.rollout_steps,
            min_steps=math.ceil(self.algo.num_minibatches / self.num_envs),
        )
        self.rollouts = 0
        """Rollouts collected in this launch: names each one's straggler count in the store."""

    # ----------------------------------------------------------------------------- the runner
    def start(self, fresh: bool) -> None:
        obs = self.collection.reset()
        if fresh:
            self._update_obs_stats(finite(obs))

    def iteration(self, global_step: int) -> IterationResult:
        start = time.perf_counter()
        lr = scheduled_learning_rate(self.cfg, global_step)
        self.algo.set_learning_rate(lr)
        rollout = self.collect()
        local_steps = rollout.steps * self.num_envs
        collect_s = time.perf_counter() - start
        sample_age = self.policy_version - rollout.policy_version
        losses, collected = self.update(rollout)
        self.policy_version += 1
        skipped = skipped_count(losses, "skipped_minibatches", self.algo, "update")
        return IterationResult(
            env_steps=collected,
            averaged={
                **losses,
                "collect_share": collect_s / (time.perf_counter() - start),
                "sample_age": sample_age,
                **self.collection.figures(),
            },
            replicated={
                "learning_rate": lr,
                "skipped_minibatches": skipped,
                "rollout_fraction": collected / self.full_rollout,
            },
            counted=self.collection.counts(),
            episodes=self.episodes.stats(),
            local_steps=local_steps,
            skipped=skipped > 0,
        )

    def train_state(self) -> TrainState:
        return ModuleTrainState(
            self.algorithm,
            self.observation_space,
            self.action_space,
            acting_modules(self.policy, self.obs_rms, self.return_rms),
            {"policy": self.algo.optimizer},
        )

    def deployable_policy(self) -> nn.Module:
        return deployable_actor(self.policy, self.obs_rms, self.cfg.normalize.clip, self.action_space)

    def close(self) -> None:
        self.collection.close()

    def collect(self) -> RolloutSegment:
        """This rank's rollout (all ``rollout_steps`` unless the straggler cut-off stops it early),
        its finished episodes counted."""
        self.rollouts += 1
        self.stragglers.begin(self.rollouts)
        request = CollectRequest(self.policy_version, should_stop=self.stragglers.should_stop)
        with self.whole_weights():
            rollout = self.collection.collect(request)
        self.stragglers.finish()
        self.episodes.add_rollout(
            rollout.env_rewards, rollout.episode_ends, rollout.restarted, rollout.episodes_cut
        )
        return rollout

    def update(self, rollout: RolloutSegment) -> tuple[dict[str, float], int]:
        """Merge the rollout into the normalisers, then GAE, advantage normalisation and the PPO
        epochs; return the loss statistics and the env steps collected by all ranks. A rollout
        that saw a non-finite observation on any rank is skipped by all ranks and touches
        neither the normalisers nor the weights."""
        with self.clock("returns"):
            batch = self.returns(rollout)
        # One sum carries what the update needs from every rank: a non-finite observation
        # anywhere, the samples collected, and the advantages' global moments.
        nonfinite_obs = rollout.nonfinite_final_obs or not torch.isfinite(rollout.raw_obs).all()
        local = [float(nonfinite_obs), rollout.steps * self.num_envs, *advantage_sums(batch.advantages)]
        nonfinite_obs, collected, *adv_sums = self.comm.sum_scalars(local)
        self.stragglers.forget()  # every rank is past collecting: it reached the sum above
        if nonfinite_obs:
            skipped = float(self.algo.steps_per_update)
            return {"skipped_minibatches": skipped}, int(collected)
        self._update_obs_stats(rollout.raw_obs.reshape(-1, rollout.raw_obs.shape[-1]))
        if self.return_rms is not None:
            moments = batch_moments(rollout.raw_returns.reshape(-1))
            self.return_rms.update_from_moments(*self.comm.merge_moments(*moments))
        if self.cfg.algo.normalize_advantages:
            batch.advantages = normalize_advantages(batch.advantages, *adv_sums)
        return self.algo.update(batch), int(collected)

    def returns(self, rollout: RolloutSegment) -> RolloutBatch:
        """The rollout as the update's batch: made by the update rule where it has returns of its
        own (``training_batch(rollout, sequence_length)``: APPO's V-trace), else with GAE's
        advantages and returns."""
        own = getattr(self.algo, "training_batch", None)
        if own is not None:
            return own(rollout, self.sequence_length)
        return rollout.batch(self.cfg.algo.gamma, self.cfg.algo.gae_lambda, self.sequence_length)

    def _update_obs_stats(self, raw_obs: torch.Tensor) -> None:
        """Merge this update's observations from all ranks into the shared statistics."""
        if self.obs_rms is not None:
            self.obs_rms.update_from_moments(*self.comm.merge_moments(*batch_moments(raw_obs)))
