"""The config's component sections: envs, model, normalisation, training, communication, logged
data, checkpoints, output, logging, evaluation, and Ray mode's cluster and worker groups. Each
algorithm's own section sits with its code (``distrl.algos``); ``distrl.config.run`` assembles them.

Sizes are explicit about scope: ``env.num_envs`` (environments), ``algo.minibatch_size`` (samples
per optimiser step) and ``train.total_steps`` (environment steps) are summed over all ranks, so a
config means the same training on any number of ranks; ``rollout_steps`` is per env, and
``num_envs_per_rank`` opts into per-rank sizes.
"""

from __future__ import annotations

import functools
from typing import Any, ClassVar, Literal

from pydantic import (
    Field,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    create_model,
    model_validator,
)

from distrl.config.base import Section, at_most_one, default_unless_either
from distrl.env_backends import ENV_BACKENDS

DEFAULT_NUM_ENVS = 8


class EnvConfig(Section):
    """The environments each rank steps: which env, how many, and the backend that vectorises them."""

    id: str = "CartPole-v1"
    """A registered Gymnasium id, or ``package.module:Class`` for a user's own env class (a
    gymnasium.Env, or with ``backend: torch`` a batched torch env)."""
    num_envs: PositiveInt | None = None
    """Environments summed over all ranks, split as evenly as the ranks allow (ranks differ by at
    most one), so adding ranks keeps the global batch and learning per env step of one process.
    8 when neither this nor ``num_envs_per_rank`` is given."""
    num_envs_per_rank: PositiveInt | None = None
    """Instead of ``num_envs``: environments on every rank (DD-PPO's and Isaac Lab's weak
    scaling); the global batch then grows with the ranks."""
    backend: Literal[tuple(ENV_BACKENDS)] = "gymnasium"  # type: ignore[valid-type]
    """Vectorisation backend: Gymnasium's SyncVectorEnv; ``gymnasium_async``: the same envs, each
    stepped in a process of its own (Gymnasium's AsyncVectorEnv) while the process holding the
    policy acts for all of them in one batched forward pass; ``envpool``: EnvPool's C++ vectorised
    envs (the ``envpool`` extra); ``gymnax``: gymnax's JAX envs, stepped jitted on JAX's CPU device
    (the ``jax`` extra); ``brax``: Brax's physics envs (``inverted_pendulum``, ``halfcheetah``,
    ...), likewise (the ``brax`` extra); with ``ml_framework: jax`` both instead step inside the
    compiled training loop, on JAX's device;
    ``torch``: batched envs on the rank's device, either distrl's CartPole-v1, Acrobot-v1 and
    Pendulum-v1 (same dynamics and time limits as Gymnasium's) or a user's ``module:Class`` with
    rsl_rl's VecEnv interface (``num_envs``, ``get_observations()``, ``step(actions) -> (obs,
    rewards, dones, extras)``, ``extras["time_outs"]``), built as
    ``Class(num_envs=..., device=..., [seed=...], **kwargs)``; ``ale``: Atari games through
    ale-py's vectorised env (the ``atari`` extra; ``ALE/Pong-v5``), CleanRL's preprocessing
    (``distrl.envs.ale_backend``), uint8 frames."""
    max_episode_steps: PositiveInt | None = None
    """Override the env's own time limit (Brax envs have none: 1000 unless set); episodes cut by
    it are truncated, not terminated."""
    kwargs: dict[str, Any] = Field(default_factory=dict)
    """Keyword arguments passed to the env constructor."""
    imports: list[str] = Field(default_factory=list)
    """Modules imported before the env is made, for Gymnasium ids a third-party package registers
    when it is imported (rl-zoo's ``--gym-packages``): e.g. ``[ale_py]`` for ``ALE/Pong-v5``,
    ``[minigrid]`` for MiniGrid's ids. Every process that builds envs imports them (learners,
    env and eval workers, ``distrl eval``)."""
    obs_keys: list[str] = Field(default_factory=list)
    """For Dict observations: the keys the policy sees, in this order (empty: all). Leave out
    keys distrl cannot encode (a mission text, say); Box, Discrete and MultiBinary keys are
    packed into one vector (``distrl.envs.dict_obs``)."""

    @model_validator(mode="before")
    @classmethod
    def _default_env_count(cls, data: Any) -> Any:
        return default_unless_either(data, "num_envs", "num_envs_per_rank", DEFAULT_NUM_ENVS)

    @model_validator(mode="after")
    def _one_env_count(self) -> EnvConfig:
        return at_most_one(self, "env", "num_envs", "num_envs_per_rank")


class ModelConfig(Section):
    """The policy's network: encoder, hidden layers, recurrent core."""

    encoder: Literal["auto", "mlp", "nature_cnn", "impala_cnn"] = "auto"
    """What turns observations into features: ``mlp`` for feature vectors, ``nature_cnn`` (Mnih
    et al.'s three convolutions and 512 units) or ``impala_cnn`` (Espeholt et al.'s three
    residual stages and 256 units) for images; ``auto`` picks by the observation space (a rank-3
    Box is an image: the Nature CNN). With a CNN, actor and critic share the encoder and each has
    one linear head (CleanRL's Atari PPO)."""
    channels: Literal["auto", "first", "last"] = "auto"
    """Where an image keeps its channels: ``first`` (CHW), ``last`` (HWC), or ``auto``: the last
    axis when it has at most 4 entries and the first has more, else the first."""
    hidden_sizes: list[PositiveInt] = Field(default_factory=lambda: [64, 64])
    """Hidden layer widths, shared by the separate actor and critic MLPs."""
    activation: Literal["tanh", "relu", "elu"] = "tanh"
    """Activation of the MLP layers."""
    memory: Literal["none", "lstm", "gru"] = "none"
    """A recurrent core between the encoder and the heads, shared by actor and critic (PPO with
    the torch learner): its state carries what single observations do not show. Trained by
    backpropagation through ``algo.bptt_len``-step chunks of the rollout."""
    memory_size: PositiveInt = 128
    """The recurrent core's hidden units (an LSTM's state is twice this: hidden and cell)."""
    init_log_std: float = 0.0
    """Initial state-independent log standard deviation for continuous actions."""


class NormalizeConfig(Section):
    """Running normalisation of observations and rewards, its statistics merged over all ranks."""

    observations: bool | None = None
    """Running observation normalisation; ``None`` means on for continuous actions only."""
    rewards: bool = False
    """Scale rewards by the running std of the discounted return (CleanRL's NormalizeReward)."""
    clip_rewards: bool = False
    """Train on the sign of each reward (Atari's reward clipping, as DQN's and CleanRL's Atari
    PPO): the episode returns logged stay the env's own (the game score). Online training only."""
    clip: PositiveFloat = 10.0
    """Clip normalised observations and scaled rewards to [-clip, clip]."""


class TrainConfig(Section):
    """The run as a whole: budget, seed, device, stop rule, and the speed and memory options."""

    total_steps: PositiveInt = 100_000
    """Environment steps summed over all ranks."""
    seed: int = 1
    """Seed of the run: env seeds (by global env index, never by rank), initial weights and
    sampling all derive from it."""
    device: str = "auto"
    """``auto`` (cuda:LOCAL_RANK when CUDA is available, else cpu), ``cpu``, ``cuda`` or ``cuda:N``."""
    stop_return: float | None = None
    """Stop early once a deterministic evaluation (``eval.episodes`` episodes on seeds apart from
    ``eval.seed``'s) reaches this mean return; the episodes are split over the ranks and every rank
    stops on the same mean."""
    stop_check_every: PositiveInt = 4
    """Updates between those early-stop evaluations."""
    stop_confirm_episodes: int = Field(20, ge=0)
    """A check that reaches ``stop_return`` is confirmed on this many more episodes (fresh seeds):
    training stops only if the mean over all of them still reaches it, so one lucky check of a
    policy that is not yet there does not end the run. 0 stops on the first check."""
    return_window: PositiveInt = 20
    """Recent training episodes per rank averaged into the logged ``episode_return_mean``."""
    torch_threads: PositiveInt = 1
    """Intra-op threads per rank on CPU; one per rank keeps ranks from fighting over cores."""
    mixed_precision: Literal["auto", "fp32", "bf16"] = "auto"
    """bfloat16 autocast of the model's heavy part (a CNN encoder), float32 weights, optimiser
    and heads (``distrl.precision``). ``auto``: on for image encoders where the device computes
    bfloat16 natively (CPUs with AVX512-BF16 or AMX, CUDA GPUs with bf16), off elsewhere and for
    feature-vector MLPs; ``fp32``: float32 throughout; ``bf16``: on wherever there is an encoder."""
    compile: bool = False
    """Run PPO's loss with its backward pass, and the policy's acting during collection, through
    ``torch.compile`` (PPO with a torch learner; refused elsewhere): fused kernels for large
    batches, after a one-time compilation of some seconds per process (cached across runs in
    torch's on-disk cache)."""
    gradient_accumulation_steps: PositiveInt = 1
    """Split each minibatch into this many micro-batches, one forward and backward pass at a time,
    and step once on their summed gradients, each weighted by its samples or tokens: the same
    step as the whole minibatch in one pass, with a k-th of its activation memory (GRPO)."""
    cuda_memory_fraction: float | None = Field(None, gt=0.0, le=1.0)
    """The share of its GPU's memory each process may allocate (``torch.cuda.
    set_per_process_memory_fraction``): several processes sharing one GPU, or headroom left for
    another job. Applies to CUDA devices; a CPU run says so in one line and goes on."""
    optimizer_offload: bool = False
    """Keep the optimiser's state (Adam's moments) and a float32 copy of the weights in CPU memory
    and step there (GRPO; ``distrl.offload``): GPU memory for weights and gradients only, at the
    cost of copying both each step. Applies to CUDA devices; a CPU run says so in one line."""
    activation_checkpointing: bool = False
    """Keep only each transformer block's input for the backward pass and recompute the rest
    there (GRPO's sequence policy; refused elsewhere): activation memory drops by more than half
    for about a third more compute."""
    sharding: Literal["none", "fsdp", "hsdp"] = "none"
    """How the learners hold the policy (PPO, A2C, DQN, SAC and GRPO with a torch learner; refused
    elsewhere). ``none``: every rank holds all of it and ranks sum gradients; ``fsdp``: each rank
    holds a shard of the weights, their gradients and the optimiser's state (FSDP2), gathering a
    layer's weights only while it computes (docs/concepts/sharding.md); ``hsdp``: shards within
    each node, replicas across nodes (2 or more nodes of equal size). With bf16
    ``mixed_precision`` the weights are gathered in bfloat16 and gradients reduced in float32;
    with ``optimizer_offload`` on a CUDA learner the shards and optimiser state live in CPU memory
    (FSDP's offload policy)."""
    hold_unsharded_gradients: bool = False
    """A sharded learner with ``gradient_accumulation_steps`` above 1 (GRPO): accumulate each
    micro-batch's gradients whole on every rank and reduce-scatter them once, after the last,
    instead of after each. Fewer collectives for a whole float32 copy of the gradients (4 bytes a
    parameter) held on every rank through the step."""
    max_bad_updates: PositiveInt = 5
    """Stop after this many updates in a row with a non-finite loss, gradient or observation
    (each is skipped on every rank, so parameters stay identical)."""
    straggler_threshold: float | None = Field(None, gt=0.0, le=1.0)
    """DD-PPO's preemption of stragglers (off when unset): once this fraction of the ranks has
    finished collecting, the others stop collecting (after at least a quarter of their
    rollout) and the update weighs each rank by the samples it has. With N ranks it acts once
    ceil(threshold * N) < N ranks are done, e.g. 0.6 on 4+ ranks, 0.5 on 2."""


class CollectConfig(Section):
    """Where a rank's envs are stepped: by the rank itself, between its updates (``processes: 0``),
    or by collectors apart from it while it learns: processes beside it (``collect.processes``; no
    Ray), or Ray mode's env workers (``workers.env``), which run ``lag`` segments ahead too."""

    processes: NonNegativeInt = 0
    """Collector processes per rank, each stepping a part of the rank's envs; 0: the rank steps
    them itself. Ray mode's env workers are ``workers.env`` instead."""
    lag: NonNegativeInt = 0
    """How many segments the processes (or Ray env workers) run ahead of the learner: segment
    ``i`` acts with exactly the weights of update ``max(i - lag, 0)``. 0: collecting and learning
    take turns, the same training as without processes; 1: the next segment is collected during
    this update, every sample one version old (as deterministic as 0)."""

    weights: Literal["exact", "newest"] = "exact"
    """Which weights a collector acts with (Ray generation workers: ``exact``): ``exact``, those of
    the request ``lag`` before (a fixed schedule, as deterministic as without processes);
    ``newest``, the newest it has been sent when it starts a segment, never waiting for the
    learner (up to ``max(lag, 1)`` finished segments wait for it, and one more to be handed over;
    ages vary with the machine's timing)."""
    queue_full: Literal["wait", "drop_oldest"] = "wait"
    """With ``weights: newest``, what a process does when its finished segments fill its queue:
    ``wait`` for the learner to read one; ``drop_oldest``, write over the oldest one the learner
    has not begun to read and go on collecting (never idle; the dropped ones are counted in
    ``dropped_segments``, and the envs' episodes cut where their steps were lost)."""
    max_restarts: NonNegativeInt = 3
    """Times in a row a collector process that died (killed, out of memory, a crash in native
    code) is started again with fresh envs before the run stops; the segment it was collecting is
    lost (``collector_restarts`` counts the restarts). An error an env raises stops the run."""
    max_age: NonNegativeInt | None = None
    """The oldest segment the learner trains on, in updates (its version minus the segment's);
    older ones are dropped and counted (``dropped_segments``). Unset: none is dropped."""

    @model_validator(mode="after")
    def _consistent(self) -> CollectConfig:
        if self.queue_full == "drop_oldest" and self.weights == "exact":
            raise ValueError(
                "queue_full=drop_oldest needs weights=newest: with exact weights every segment is "
                "trained on, in order"
            )
        if self.weights == "exact" and self.max_age is not None and self.max_age < self.lag:
            raise ValueError(
                f"max_age={self.max_age} is below lag={self.lag}: with exact weights every segment is "
                f"{self.lag} updates old and would be dropped"
            )
        return self

    def ahead(self) -> str | None:
        """The first key set that needs collectors apart from the rank (``key=value``), if any."""
        if self.lag:
            return f"collect.lag={self.lag}"
        if self.weights == "newest":
            return "collect.weights=newest"
        return None if self.max_age is None else f"collect.max_age={self.max_age}"


class CommConfig(Section):
    """How ranks talk: the transport for CPU sums, timeouts, the network interface."""

    cpu_sum: Literal["auto", "gloo", "socket"] = "auto"
    """Sums on CPU ranks (gradients, metrics): ``socket`` over distrl's own authenticated TCP
    connections (power-of-two groups only), ``gloo`` over gloo's collectives, ``auto`` the
    sockets where they fit and gloo elsewhere. GPU ranks always use NCCL."""
    timeout_s: PositiveFloat = 300.0
    """Process-group timeout: a collective waiting longer than this fails instead of hanging."""
    network_interface: str | None = None
    """Interface for gloo/NCCL traffic (e.g. ib0); default: the one that routes to the master."""
    time_sync_wait: bool = False
    """Tell the time ranks wait for the slowest one (``time/sync_wait``) from the gradient
    transfer (``time/sync_transfer``) with one extra one-number sum per gradient step; off, both
    are ``time/sync``."""
    sync_spin_ms: float | None = Field(None, ge=0.0)
    """How long a rank waiting in a CPU sum polls before it sleeps (distrl's socket sums). Unset:
    50 ms when every rank of the node has a core of its own, else 0 (spinning would take the
    core from the rank it waits for)."""


class DataConfig(Section):
    """Logged transitions to learn from instead of envs (offline DQN)."""

    path: str | None = None
    """A directory of Parquet files with ReAgent's columns (``distrl collect`` writes them);
    unset: learn online from envs. ``--data DIR`` sets it. ``train.total_steps`` then counts
    logged transitions trained on, summed over all ranks."""
    on_bad_row: Literal["error", "skip"] = "error"
    """A malformed row (wrong length, NaN, propensity outside (0, 1], impossible action) stops
    the run with its file, row and column, or is dropped and counted (``skipped_rows``)."""
    shuffle_buffer: PositiveInt = 50_000
    """Rows a rank holds at most while it shuffles its part of the dataset."""
    layout: Literal["copy", "split"] = "copy"
    """ReAgent's two layouts. ``copy``: every node holds the whole dataset at ``path`` and all
    ranks divide it (checked: the nodes' copies must match). ``split``: each node holds its own
    part at ``path`` and that node's ranks divide it; the parts together are the dataset."""


class CheckpointConfig(Section):
    """When checkpoints are written and how many are kept."""

    interval_steps: PositiveInt = 50_000
    """Write a checkpoint every this many global env steps (and always at the end)."""
    interval_minutes: PositiveFloat | None = None
    """Also write one when this many minutes passed since the last (rank 0's clock decides)."""
    keep_last: PositiveInt = 3
    """Checkpoints kept; older ones are deleted only after a newer one is safely on disk."""
    keep_best: bool = True
    """Also write a checkpoint whenever a check the ranks make of their own weights scores higher
    than every earlier one (the stop check's return, ``train.stop_return``; GRPO's held-out exact
    match every ``eval.every`` updates), and keep it beside the newest ``keep_last``;
    ``distrl eval --best`` evaluates it. Eval workers' results do not count: they score older
    weights than the ranks hold."""


class OutputConfig(Section):
    """The final policy written out for deployment (one file, or a model directory), besides the
    run dir."""

    path: str | None = None
    """When set, rank 0 writes the final deterministic policy here as ``distrl export`` does, in
    the format the name's suffix names among those the algorithm exports, else its first: ONNX
    for a ``.onnx`` name, TorchScript otherwise; GRPO: a transformers model directory."""


class LogConfig(Section):
    """What rank 0 logs: TensorBoard, the progress line, profiler traces."""

    tensorboard: bool = True
    """Write TensorBoard event files into ``<run dir>/tb`` (rank 0), besides ``metrics.jsonl``."""
    progress: bool = True
    """Show progress on rank 0: a bar when stdout is a terminal, else (a log file, a pipe) a plain
    line at every tenth of ``train.total_steps``."""
    profile_updates: NonNegativeInt = 0
    """Record torch.profiler Chrome traces of this many updates (after the first) on every rank
    into the run dir's ``profile/rank<r>.json``, and of as many calls on every Ray worker
    (``profile/<worker>.json``); 0: off. ``--profile N`` sets it."""


class EvalConfig(Section):
    """Deterministic evaluation: during training (the stop check, eval workers) and ``distrl eval``."""

    episodes: PositiveInt = 10
    """Deterministic episodes per evaluation (held-out prompts for GRPO); also ``distrl eval``'s default."""
    seed: int = 10_000
    """First seed of the evaluation episodes (kept apart from training seeds)."""
    every: PositiveInt = 5
    """With eval workers (``workers.eval``, Ray mode): updates between evaluations of the newest
    weights. An evaluation still running when the next is due leaves that one queued; a newer
    one replaces it. Without them, an algorithm that evaluates in the loop (GRPO's ``heldout/*``
    on held-out prompts) has the ranks evaluate every this many updates."""


class ClusterConfig(Section):
    """Ray mode's virtual cluster (``distrl train --launcher ray``), checked against what the Ray
    cluster has before any worker starts."""

    num_nodes: PositiveInt = 1
    """Nodes the job needs (alive Ray nodes)."""
    cpus_per_node: PositiveFloat | None = None
    """CPUs the job may use on each node; unset: whatever the workers ask for."""
    gpus_per_node: NonNegativeInt = 0
    """GPUs the job may use on each node."""
    strategy: Literal["SPREAD", "PACK"] = "SPREAD"
    """How the nodes' placement groups (one per node, its workers on one Ray node) share Ray's
    nodes: SPREAD gives each a Ray node of its own, PACK lets Ray put several on one node."""
    ray_address: str | None = None
    """The Ray cluster to join (``auto`` or ``HOST:PORT``); ``--ray-address`` overrides it; unset
    and without ``$RAY_ADDRESS``: start a local one."""
    namespace: str = "distrl"
    """The Ray namespace of the job's actors (``--namespace`` overrides it)."""
    placement_timeout_s: PositiveFloat = 30.0
    """A placement group not placed within this many seconds is an error naming what is missing;
    the job's actors, once placed, get as long again to start."""
    usage_every_s: PositiveFloat = 10.0
    """How often the driver records every worker's CPU, memory, GPU memory and work done in the
    run dir's ``workers.jsonl`` (``distrl status`` shows the same, live)."""
    ray_temp_dir: str | None = None
    """Where a local Ray instance keeps its sessions, logs and auth token; unset: ``<run dir>/ray``
    (reached through a short link in the system's temp dir when the path is too long for Ray's
    Unix sockets)."""


GENERIC_WORKER_GROUPS = {
    "env": "Environment workers in all (online PPO and DQN), shared out over the learners: each "
    "steps a part of its learner's envs with a CPU copy of the newest weights; 0: learners step "
    "their own envs.",
    "eval": "Evaluation workers in all: every ``eval.every`` updates the newest weights go to a free "
    "one, which plays ``eval.episodes`` deterministic episodes while training goes on; rank 0 logs "
    "the result (``eval/return_mean``) once it is in. 0: no evaluation workers.",
    "data": "Data workers in all (offline DQN, ``data.path``), shared out over the learners: they "
    "read, validate and shuffle each learner's part of the dataset and send it batches, so learners "
    "read no file; 0: learners read their own part.",
}
"""The generic worker groups (``ray.groups.WORKER_GROUPS``), in bundle order: what their workers
do (``workers.<group>``'s description)."""


class WorkersSection(Section):
    """Ray mode's workers: the learners (``policy``, the seeds' "policy workers", which train),
    the retry rules, and the worker groups beside the learners that the run's algorithm has
    (``distrl.ray.groups``), each sized by ``workers.<group>`` (in all) or
    ``workers.<group>_per_node`` with ``workers.cpus_per_<group>`` per worker: the generic env,
    eval and data workers, or in their place an algorithm's own (GRPO: verifier and prompt
    workers), listed below for each algorithm."""

    groups: ClassVar[tuple[tuple[str, str], ...]] = ()
    """Its worker groups beside the learners, in bundle order: (name, what their workers do)."""

    policy: PositiveInt = 1
    """Learner workers in all: the ranks of one torch.distributed group, each with its own envs
    (``env.num_envs`` is split over them as over torchrun's ranks)."""
    policy_per_node: PositiveInt | None = None
    """Instead of ``policy``: learners on each of ``cluster.num_nodes`` nodes."""
    cpus_per_policy: PositiveFloat = 1.0
    """CPUs Ray reserves for each learner."""
    gpus_per_policy: NonNegativeFloat = 0.0
    """GPUs Ray reserves for each learner (1: a GPU of its own, NCCL between learners)."""
    max_restarts: NonNegativeInt = 3
    """A failed worker beside the learners is restarted and its work (a part of the rollout, an
    evaluation, a chunk of batches, a part of the completions) done again, this many times in a
    row at most; the learners' group is rebuilt from the newest checkpoint after a learner dies
    this many times in all."""
    retry_backoff_s: PositiveFloat = 0.5
    """Wait before the first retry; doubled on each further one."""
    call_timeout_s: PositiveFloat = 600.0
    """A call to a worker beside the learners not answered within this many seconds is a hang (a
    stopped process, a deadlock, a verifier stuck): the worker is named in one line, killed and
    restarted, and its work done again, as a crashed worker's. Longer than any one call takes
    (a part of a rollout, a part of the completions, an evaluation)."""

    @classmethod
    def group_names(cls) -> list[str]:
        """Its worker groups beside the learners, in bundle order."""
        return [name for name, _ in cls.groups]

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as the groups its class was made from and its values: the class is made at run
        time (``workers_section``), so a process it is sent to (a Ray learner) makes it again."""
        return _rebuilt_workers, (self.groups, self.model_dump())


def group_keys(group: str) -> tuple[str, str, str]:
    """A worker group's keys in ``workers:``: its total, its count per node, its CPUs per worker."""
    return group, f"{group}_per_node", f"cpus_per_{group}"


@functools.cache
def workers_section(groups: tuple[tuple[str, str], ...]) -> type[WorkersSection]:
    """The ``workers:`` section with the keys of ``groups`` ((name, what their workers do), in
    bundle order) beside the learners' (``config.run.workers_config`` picks the run's)."""
    keys: dict[str, Any] = {}
    for name, about in groups:
        total, per_node, cpus = group_keys(name)
        keys[total] = (NonNegativeInt, Field(0, description=about))
        keys[per_node] = (
            NonNegativeInt | None,
            Field(
                None,
                description=f"Instead of ``{name}``: {name} workers on each of ``cluster.num_nodes`` nodes.",
            ),
        )
        keys[cpus] = (
            PositiveFloat,
            Field(
                1.0,
                description=f"CPUs Ray reserves for each {name} worker (less than 1 lets several share "
                "a core).",
            ),
        )
    names = [name for name, _ in groups]
    listed = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
    doc = f"The keys of the {listed} workers beside the learners."
    section = create_model(f"WorkersConfig[{','.join(names)}]", __base__=WorkersSection, __doc__=doc, **keys)
    section.groups = groups
    return section


def _rebuilt_workers(groups: tuple[tuple[str, str], ...], values: dict[str, Any]) -> WorkersSection:
    return workers_section(groups).model_validate(values)


WorkersConfig = workers_section(tuple(GENERIC_WORKER_GROUPS.items()))
"""The ``workers:`` section of an algorithm without worker groups of its own."""
