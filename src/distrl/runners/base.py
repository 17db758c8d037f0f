"""What an algorithm's runner supplies to the shared training loop (``distrl.runners.loop``).

A runner owns its envs or data, modules, optimisers and buffers, and runs one iteration at a
time (collect, returns, update for PPO). Everything else a run needs (metrics, stop rules,
checkpoints, resume, preemption) is the loop's.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import gymnasium as gym
import torch
from torch import nn

from distrl.collect.base import Collector, CollectorInputs, EnvWorkers, build_collector
from distrl.collect.rollout import noise_seed
from distrl.comm import Comm
from distrl.envs import VecEnv, make_vec_env
from distrl.errors import UserError
from distrl.io.train_state import SavedState, TrainState
from distrl.precision import resolved
from distrl.runners.learner import LearnerNetworks
from distrl.seeding import env_seeds, seed_torch
from distrl.sharding import EnvShard, shard_envs
from distrl.timing import PhaseClock

if TYPE_CHECKING:
    from distrl.config.run import RunConfig
    from distrl.ope.dqn import LoggedSteps


class EvalWorkers(Protocol):
    """Processes that evaluate a snapshot of the policy while training goes on."""

    def submit(self, policy: SavedState, episodes: int, seed: int) -> None:
        """Evaluate ``policy`` (a ``train_state.snapshot``) on ``episodes`` deterministic episodes
        from ``seed``, as soon as a worker is free; never waits."""

    def results(self) -> dict[str, float]:
        """Metrics of the evaluations finished since the last call; never waits."""

    def counts(self) -> dict[str, float]:
        """The workers' failures since the launch started (``IterationResult.counted``)."""


COLLECTION_FIGURES = (
    "sample_age", "dropped_segments", "queue_depth", "time/publish", "time/collector_wait", "time/generate",
)  # fmt: skip
"""A rank's figures of collection ahead of it, shown live (``StatusBoard``) where its update has them."""


class StatusBoard(Protocol):
    """Where a rank shows how it is doing to the launcher's live status (``distrl status``)."""

    def publish(self, usage: dict[str, float], samples: int, collection: dict[str, float]) -> None:
        """This rank's resource usage (``usage.ProcessUsage``), the samples (env steps or logged
        rows) it has collected so far, and its last update's ``COLLECTION_FIGURES`` (collecting
        ahead of it: the sample's age, publishing and waiting); never waits."""


class DataWorkers(Protocol):
    """Processes that read, validate and shuffle this rank's part of the dataset for it (Ray
    mode's data workers): the rank then reads no file."""

    def open(self, path: Path, on_bad_row: str) -> Any:
        """The dataset as the rank sees it: ``LoggedDataset``'s shape, files, parts and counts."""

    def stream(self, units: list[Any], buffer_rows: int, seed: int) -> Any:
        """``ShuffledStream``'s batches of ``units``, read by the workers."""

    @property
    def nodes(self) -> list[str]:
        """The node each worker runs on (known once the dataset is open)."""

    def stream_node_parts(self, shares: list[tuple[int, int]], buffer_rows: int, seed: int) -> Any:
        """``stream`` where worker w reads part ``shares[w]`` = (index, count) of the dataset on
        its own node (``data.layout=split``)."""

    def cpe_steps(self, max_rows: int) -> LoggedSteps:
        """``ope.dqn.cpe_steps`` of the dataset."""

    def counts(self) -> dict[str, float]:
        """The workers' failures since the launch started (``IterationResult.counted``)."""


@dataclass
class RemoteWorkers:
    """A rank's worker processes, by the group the launcher gave it (Ray mode's ``ray.groups``:
    env, eval and data workers, or its algorithm's own); a group it lacks: the rank does that job
    itself (or not at all)."""

    groups: dict[str, Any] = field(default_factory=dict)
    """What the rank calls each group's workers through (``WorkerGroup.calls``), by group name."""
    status: StatusBoard | None = None
    """Where the rank's own usage goes for the launcher's live status (Ray mode's learners)."""
    collector_processes: EnvWorkers | None = None
    """Processes beside the rank that step its envs without Ray (``collect.processes``)."""

    def group(self, name: str) -> Any | None:
        """This rank's workers of group ``name`` (an algorithm's own: GRPO's ``verifier``); None
        when it has none."""
        return self.groups.get(name)

    @property
    def env(self) -> EnvWorkers | None:
        """Step this rank's envs for it: Ray mode's env workers, or its collector processes."""
        env_workers = self.group("env")
        return self.collector_processes if env_workers is None else env_workers

    @property
    def eval(self) -> EvalWorkers | None:
        """Evaluate the newest weights asynchronously (rank 0's)."""
        return self.group("eval")

    @property
    def data(self) -> DataWorkers | None:
        """Read this rank's part of a logged dataset."""
        return self.group("data")


@dataclass
class RunContext:
    cfg: RunConfig
    comm: Comm
    device: torch.device
    launch_index: int = 0
    """How many times this run was started before (``io.train_state.launch_index``): shifts env
    seeds so a resumed run's fresh episodes get seeds no earlier launch used."""
    node_rank: int = 0
    """This process's node (from the launcher): which ranks share a node-local dataset part."""
    workers: RemoteWorkers = field(default_factory=RemoteWorkers)
    """Processes the launcher gives this rank for part of its work (Ray mode's worker groups)."""
    restart_count: int = 0
    """Times the launcher restarted the process group in this job (torchrun's elastic restarts,
    a requeued SLURM job, Ray mode's rebuilt learners)."""
    clock: PhaseClock | None = None
    """The training loop's phase clock: what the runner builds times its phases on it (the
    shared phases and the algorithm's, when not given)."""

    def __post_init__(self) -> None:
        if self.clock is None:
            self.clock = PhaseClock.for_algorithm(self.cfg.algo)


@dataclass
class EpisodeStats:
    """This rank's recent finished episodes (the loop sums them over ranks)."""

    return_sum: float
    length_sum: float
    count: int
    finished: int
    """Episodes finished since the start of the launch."""


@dataclass
class IterationResult:
    env_steps: int
    """Env steps collected by all ranks in this iteration (the same number on every rank)."""
    averaged: dict[str, float]
    """Per-rank numbers the loop averages over ranks (losses, timing shares)."""
    replicated: dict[str, float] = field(default_factory=dict)
    """Numbers already equal on every rank (learning rate, share of the rollout collected)."""
    counted: dict[str, float] = field(default_factory=dict)
    """Events this rank counted since its launch started (worker failures): the loop sums them
    over ranks and adds what the run's earlier launches counted (kept in checkpoints)."""
    episodes: EpisodeStats | None = None
    local_steps: int = 0
    """Env steps (logged rows, offline) this rank collected: with its collection time, the
    rank's own speed, so the loop can name the slowest rank."""
    skipped: bool = False
    """The update was skipped on every rank (non-finite numbers): counts towards
    ``train.max_bad_updates`` and withholds the next checkpoint."""
    trained: list[int] | None = None
    """What this rank's update trained on, by global index (GRPO: its prompts), for the run's
    ledger (``io.metrics.LEDGER_FILE``); None: the algorithm keeps none."""


def check_update_rule(update: object, protocol: type) -> None:
    """An update rule made by a runner has what the runner reads of it (``protocol``'s members):
    one line naming the missing ones, before the first iteration, not an AttributeError in it."""
    wanted = [name for name in vars(protocol).get("__annotations__", {}) if not name.startswith("_")]
    wanted += [name for name in vars(protocol) if not name.startswith("_")]
    if missing := sorted({name for name in wanted if not hasattr(update, name)}):
        raise UserError(
            f"{type(update).__name__} lacks {', '.join(missing)}, which the runner reads of its update "
            f"rule ({protocol.__module__}.{protocol.__name__}: docs/algorithms/your-own.md)",
            code="plugin-update-rule-incomplete",
        )


def skipped_count(stats: dict[str, float], key: str, update: object, method: str) -> float:
    """``stats[key]`` popped: the steps an update rule's ``method`` skipped on every rank (a
    non-finite gradient), which every rule reports (0.0 for none); one line naming the rule if not."""
    if key not in stats:
        raise UserError(
            f"{type(update).__name__}.{method} returned no {key!r}: return the count of steps skipped "
            f"for a non-finite gradient (0.0 for none) beside its statistics ({', '.join(stats) or 'none'})",
            code="plugin-update-no-skipped-count",
        )
    return stats.pop(key)


class Runner(ABC):
    algorithm: str
    networks: LearnerNetworks | None = None
    """Its networks as ``runners.learner.set_up_learner`` made them: whole or sharded, and what
    ``whole_weights`` gathers; None for a learner the set-up does not make (a JAX one)."""
    steps_per_iteration: int | None = None
    """The env steps (over all ranks) of every iteration, where that is fixed: the loop then plans
    the budget as whole iterations (its progress and final line); None where they vary."""

    @abstractmethod
    def start(self, fresh: bool) -> None:
        """Called once before the first iteration of a launch (``fresh``: global step 0)."""

    @abstractmethod
    def iteration(self, global_step: int) -> IterationResult:
        """One round of collecting and learning; identical parameters on every rank after it."""

    @abstractmethod
    def train_state(self) -> TrainState:
        """The modules and optimisers to checkpoint, by reference (the loop also restores them)."""

    @abstractmethod
    def deployable_policy(self) -> nn.Module:
        """The live deterministic policy: raw observations in, env actions out."""

    @property
    def sharded(self) -> bool:
        """Each rank holds a shard of the policy (``train.sharding``), not all of it."""
        return self.networks is not None and self.networks.sharded

    def whole_weights(self) -> AbstractContextManager[None]:
        """A block in which every rank holds the policy's whole weights, so that each may run a
        number of forward passes of its own (acting, evaluating): a sharded learner gathers them,
        every rank entering together (``LearnerNetworks.whole_weights``)."""
        return nullcontext() if self.networks is None else self.networks.whole_weights()

    def rank_state(self) -> dict[str, Any]:
        """This rank's own JSON state worth saving (a buffer position, a data cursor)."""
        return {}

    def load_rank_state(self, state: dict[str, Any]) -> None:
        """Restore what ``rank_state`` returned on this rank in an earlier launch."""
        if state:
            raise ValueError(f"{type(self).__name__} keeps no per-rank state but was given {sorted(state)}")

    @abstractmethod
    def close(self) -> None:
        """Release envs, files and workers."""


class CountsGradientSteps(Runner):
    """A runner whose algorithm (``algo.gradient_steps_done``) times its target-network updates
    by gradient steps: the count is saved per rank, so the cadence carries across launches (the
    last of a runner's bases to keep rank state: it ends the chain)."""

    algo: Any

    def rank_state(self) -> dict[str, int]:
        return {"gradient_steps_done": self.algo.gradient_steps_done}

    def load_rank_state(self, state: dict[str, int]) -> None:
        self.algo.gradient_steps_done = state.get("gradient_steps_done", 0)


def rank_env_seeds(ctx: RunContext) -> tuple[EnvShard, list[int]]:
    """Seed this rank's torch RNG; its share of the envs and their seeds (by global index)."""
    cfg, comm = ctx.cfg, ctx.comm
    seed_torch(cfg.train.seed, comm.rank)
    shard = shard_envs(cfg.env, comm.rank, comm.world_size)
    return shard, env_seeds(cfg.train.seed, shard, start_index=ctx.launch_index)


def rank_envs(ctx: RunContext) -> tuple[EnvShard, VecEnv]:
    """Seed this rank's torch RNG and build its share of the envs, each seeded by its global index."""
    shard, seeds = rank_env_seeds(ctx)
    return shard, make_vec_env(ctx.cfg.env, seeds, ctx.device)


def scheduled_learning_rate(cfg: RunConfig, global_step: int) -> float:
    """``algo.learning_rate``, decayed linearly to zero over ``train.total_steps`` when
    ``algo.anneal_lr``: by global step, so the schedule survives a resume on a different number
    of ranks."""
    lr = cfg.algo.learning_rate
    return lr * max(1.0 - global_step / cfg.train.total_steps, 0.0) if cfg.algo.anneal_lr else lr


@dataclass
class RankEnvs:
    """A rank's envs where they are stepped: here (``env``) or by its env workers (``env`` None,
    the workers started)."""

    shard: EnvShard
    noise_seed: list[int]
    """The rank's action-noise seed (``noise_seed``), which the workers were given too."""
    env: VecEnv | None
    observation_space: gym.spaces.Space
    action_space: gym.spaces.Space


def start_rank_envs(ctx: RunContext) -> RankEnvs:
    """Seed the rank and build its envs, or have its env workers build them."""
    cfg = ctx.cfg
    shard, seeds = rank_env_seeds(ctx)
    noise = noise_seed(cfg.train.seed, ctx.comm.rank, ctx.launch_index)
    if ctx.workers.env is not None:
        # The workers act in the precision this rank updates in, whatever their own CPUs do.
        train = cfg.train.model_copy(
            update={"mixed_precision": resolved(cfg.train.mixed_precision, ctx.device)}
        )
        spaces = ctx.workers.env.start(cfg.model_copy(update={"train": train}), seeds, noise)
        return RankEnvs(shard, noise, None, *spaces)
    env = make_vec_env(cfg.env, seeds, ctx.device)
    return RankEnvs(shard, noise, env, env.observation_space, env.action_space)


def rank_collector(ctx: RunContext, rank_envs: RankEnvs, modules: dict[str, nn.Module]) -> Collector[Any]:
    """Where the rank's segments come from, acting with ``modules`` (its live acting modules, by
    checkpoint name): its algorithm's collector over its own envs, or its env workers acting with
    copies of them."""
    if rank_envs.env is None:
        return ctx.workers.env.acting(modules, ctx.device, ctx.clock)
    count = rank_envs.shard.count
    inputs = CollectorInputs(
        ctx.cfg, rank_envs.env, modules, rank_envs.noise_seed, count, slice(None), ctx.device, ctx.clock
    )
    return build_collector(inputs)
