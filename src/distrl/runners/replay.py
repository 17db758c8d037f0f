"""What online replay-based runners share (DQN, SAC): every rank steps its own envs (or has env
workers step them) with an exploring policy into its own replay buffer, and draws its share of
every global batch from it; gradients are averaged across ranks, so all ranks hold identical
networks.

``iteration()`` reads as the algorithm: collect ``rollout_steps`` steps per env -> (once
``learning_starts`` env steps are in) ``gradient_steps`` gradient steps.
"""

from __future__ import annotations

import functools
import time
from abc import abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar, Protocol

import gymnasium as gym
import torch
from torch import nn

from distrl.algos.flat_gradients import GradientSync
from distrl.collect.base import Collector, CollectRequest
from distrl.envs.base import obs_tensor_dtype
from distrl.errors import UserError
from distrl.models.continuous import ActionScale, ScaledDeterministicActor, TwinQ
from distrl.models.encoders import has_images
from distrl.precision import low_precision
from distrl.runners.base import (
    CountsGradientSteps,
    IterationResult,
    RankEnvs,
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
from distrl.sharding import even_split
from distrl.storage.replay import ReplayBuffer, TransitionBatch
from distrl.storage.transitions import TransitionSegment

if TYPE_CHECKING:
    from distrl.config.run import RunConfig
    from distrl.config.sections import ModelConfig


class ReplayUpdate(Protocol):
    def set_learning_rate(self, lr: float) -> None: ...

    def gradient_step(self, batch: TransitionBatch) -> dict[str, float]:
        """One synchronised step on this rank's share of a global batch; its statistics and
        ``skipped_steps``."""
        ...


def batch_share(cfg: RunConfig, rank: int, world_size: int) -> int:
    """This rank's samples of each global batch (``algo.batch_size``); one line if a rank gets none."""
    if cfg.algo.batch_size < world_size:
        raise UserError(
            f"algo.batch_size={cfg.algo.batch_size} counts samples over all ranks and is fewer than the "
            f"{world_size} ranks; every rank needs at least one sample per gradient step: "
            f"raise it to at least {world_size}",
            code="sharding-batch-fewer-than-ranks",
        )
    return even_split(cfg.algo.batch_size, rank, world_size)[1]


class ReplayRunner(Runner):
    """Subclasses build ``algo`` (a ``ReplayUpdate``), then call ``start_replay``."""

    algo: ReplayUpdate
    exploration_metric: ClassVar[str]
    """The name ``exploration``'s value is logged under (each subclass sets it)."""
    n_step = 1
    """Rewards summed per sampled transition before bootstrapping."""

    def start_replay(
        self,
        ctx: RunContext,
        rank_envs: RankEnvs,
        acting: dict[str, torch.nn.Module],
        action_dtype: torch.dtype,
    ) -> None:
        """The rank's replay buffer (``algo.buffer_size`` over all ranks: the same history per
        env), fed by its collector acting with ``acting`` (the live modules, by checkpoint name)."""
        check_update_rule(self.algo, ReplayUpdate)
        cfg = ctx.cfg
        self.cfg = cfg
        self.clock = ctx.clock
        self.envs = rank_envs.shard
        self.collection: Collector[TransitionSegment] = rank_collector(ctx, rank_envs, acting)
        self.policy_version = 0
        """Updates in this launch: the version of the weights the next segment acts with."""
        space: gym.spaces.Space = rank_envs.observation_space
        self.replay = ReplayBuffer(
            cfg.algo.history_per_env(self.envs.global_count),
            self.envs.count,
            space.shape,
            ctx.device,
            obs_tensor_dtype(space),
            action_shape=rank_envs.action_space.shape,
            action_dtype=action_dtype,
        )
        self.steps_per_iteration = cfg.algo.rollout_steps * self.envs.global_count
        self.episodes = EpisodeTracker(self.envs.count, cfg.train.return_window, ctx.device)
        self.batch_share = batch_share(cfg, ctx.comm.rank, ctx.comm.world_size)

    @abstractmethod
    def exploration(self, global_step: int) -> float:
        """What the collection explores with at ``global_step`` (global: the same on every rank)."""

    # ----------------------------------------------------------------------------- the runner
    def start(self, fresh: bool) -> None:
        if not hasattr(self, "collection"):
            raise UserError(
                f"{type(self).__name__} never called start_replay, which builds its replay buffer and "
                "collector: call it at the end of __init__, once self.algo is built",
                code="plugin-replay-not-started",
            )
        self.collection.reset()

    def iteration(self, global_step: int) -> IterationResult:
        start = time.perf_counter()
        lr = scheduled_learning_rate(self.cfg, global_step)
        self.algo.set_learning_rate(lr)
        exploration = self.exploration(global_step)
        sample_age = self.policy_version - self.collect(exploration).policy_version
        collect_s = time.perf_counter() - start
        stats: dict[str, float] = {}
        if global_step + self.steps_per_iteration >= self.cfg.algo.learning_starts:
            stats = self.learn()
            self.policy_version += 1
        skipped = stats.pop("skipped_steps", 0.0)
        return IterationResult(
            env_steps=self.steps_per_iteration,
            local_steps=self.cfg.algo.rollout_steps * self.envs.count,
            averaged={
                **stats,
                "collect_share": collect_s / (time.perf_counter() - start),
                "sample_age": sample_age,
                **self.collection.figures(),
            },
            replicated={"learning_rate": lr, self.exploration_metric: exploration, "skipped_steps": skipped},
            counted=self.collection.counts(),
            episodes=self.episodes.stats(),
            skipped=skipped > 0,
        )

    def close(self) -> None:
        self.collection.close()

    # ----------------------------------------------------------------------------- collect, learn
    def collect(self, exploration: float) -> TransitionSegment:
        """``rollout_steps`` exploring steps of every env, added to the replay buffer."""
        with self.whole_weights():
            segment = self.collection.collect(CollectRequest(self.policy_version, exploration=exploration))
        self.episodes.add_rollout(
            segment.env_rewards, segment.episode_ends, segment.restarted, segment.episodes_cut
        )
        self.replay.add_segment(segment)
        return segment

    def learn(self) -> dict[str, float]:
        """``gradient_steps`` steps, each on this rank's share of a global batch; mean statistics."""
        cfg = self.cfg.algo
        totals: dict[str, float] = {"skipped_steps": 0.0}
        for _ in range(cfg.gradient_steps):
            with self.clock("replay"):
                batch = self.replay.sample(self.batch_share, self.n_step, cfg.gamma)
            stats = self.algo.gradient_step(batch)
            totals["skipped_steps"] += skipped_count(stats, "skipped_steps", self.algo, "gradient_step")
            for key, value in stats.items():
                totals[key] = totals.get(key, 0.0) + value
        skipped = totals.pop("skipped_steps")
        return {"skipped_steps": skipped, **{k: v / cfg.gradient_steps for k, v in totals.items()}}


class ContinuousActorRunner(CountsGradientSteps, ReplayRunner):
    """What SAC's and TD3's runners share: an actor and twin critics over a flat Box of actions,
    set up alike on every rank (``runners.learner``); uniformly random actions until
    ``learning_starts``, then the actor's own; ``actor`` deployed through the env's bounds; its
    weights gathered for acting and evaluating when sharded. Subclasses name their actor, the
    networks their update keeps frozen copies of, and build that update."""

    exploration_metric = "random_actions"
    actor_class: ClassVar[Callable[[gym.Space, gym.spaces.Box, ModelConfig], nn.Module]]
    """What acts, built from the observation space, the action space and ``model:``."""
    copied: ClassVar[tuple[str, ...]]
    """The networks (``actor``, ``critic``) whose frozen copies, made before sharding, the update
    keeps as targets, in this order."""
    actor: nn.Module
    critic: TwinQ
    action_space: gym.spaces.Box

    def __init__(self, ctx: RunContext) -> None:
        cfg, device = ctx.cfg, ctx.device
        rank_envs = start_rank_envs(ctx)
        self.observation_space, self.action_space = rank_envs.observation_space, rank_envs.action_space
        space = self.action_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise UserError(
                f"env {cfg.env.id!r}: {cfg.algo.name} needs a Box of continuous actions, not {space}; "
                "algo.name=dqn or ppo trains on it",
                code="algo-continuous-action-space",
            )
        self.actor = self.actor_class(self.observation_space, space, cfg.model).to(device)
        self.critic = TwinQ(self.observation_space, int(space.shape[0]), cfg.model).to(device)
        dtype = low_precision(cfg.train.mixed_precision, device, has_images(self.observation_space))
        self.actor.low_precision = self.critic.low_precision = dtype  # their image encoders' autocast
        copied = [getattr(self, name) for name in self.copied]
        self.networks = set_up_learner(ctx.comm, cfg.train.sharding, [self.actor, self.critic], copied)
        sync = functools.partial(ctx.comm.sum_gradients_, clock=ctx.clock)
        self.algo = self.update_rule(ctx, ActionScale(space).to(device), sync, self.networks.copies)
        self.start_replay(ctx, rank_envs, {"actor": self.actor}, torch.float32)

    @abstractmethod
    def update_rule(
        self, ctx: RunContext, scale: ActionScale, sync: GradientSync, copies: list[nn.Module]
    ) -> ReplayUpdate:
        """The update of ``actor`` and ``critic``, given the env's bounds, the gradient-sync hook
        and the frozen copies of ``copied``."""

    def exploration(self, global_step: int) -> float:
        """1 (uniformly random actions) until ``learning_starts`` global env steps, then 0."""
        return 1.0 if global_step < self.cfg.algo.learning_starts else 0.0

    def deployable_policy(self) -> nn.Module:
        return ScaledDeterministicActor(self.actor, self.action_space)
