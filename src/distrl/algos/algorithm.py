"""What an algorithm is: the ``Algorithm`` entry naming its config section and, as
``module:attribute`` strings imported only when used, everything else it brings, and the
``WorkerGroup`` of Ray workers it may declare. Apart from the registry (``algos.registry``) so an
algorithm package's entry can be written without importing the catalogue that names it."""

from __future__ import annotations

from dataclasses import dataclass, field

from distrl.config.algorithm import AlgorithmSection

ENVS = "envs"
"""Learns online from envs (a sequence policy: from its task), with a torch learner."""
LOGGED_DATA = "logged data"
"""Learns from a logged dataset (``data.path``)."""
JAX = "jax"
"""Learns online from envs, with a JAX learner (``ml_framework: jax``)."""
JAX_NATIVE_ENVS = "jax native envs"
"""Learns with a JAX learner from JAX envs stepped inside its compiled loop (gymnax, Brax)."""
POLICY_FILES = {"torchscript": "distrl.io.export:export_policy", "onnx": "distrl.io.export:export_policy"}
"""Export formats of a policy of tensors in and actions out: one TorchScript or ONNX file."""
EPISODES_LINE = (
    "{env}: return {return_mean:.1f} +- {return_std:.1f} over {episodes} deterministic episodes "
    "({chosen} checkpoint {checkpoint})"
)
"""``distrl eval``'s line for returns of deterministic episodes in an env."""


@dataclass(frozen=True)
class WorkerGroup:
    """A group of Ray workers beside the learners, declared once: its config keys, its actor, what
    a learner calls its share through, how it is shared out and how its metrics are named. The
    generic groups (env, eval, data) are ``ray.groups.WORKER_GROUPS``; an algorithm declares its
    own in its ``Algorithm`` entry (``worker_groups``)."""

    name: str
    """Its config keys (``workers.<name>``, ``workers.<name>_per_node``, ``workers.cpus_per_<name>``),
    its actors' names and its messages say it: lowercase letters (actor names are split on ``-``)."""
    about: str
    """What its workers do: the description of ``workers.<name>``."""
    actor: str
    """``module:Class`` of the group's actor."""
    calls: str
    """``module:Class`` a learner calls its share of the group through, made as ``Class(this group,
    actor handles, ray.workers.Retries)`` (``runners.base.RemoteWorkers.group``)."""
    shared_out: bool
    """Split over the learners (each needs one of its own); else all rank 0's."""
    metric_prefix: str
    """Its metrics' names begin with it (``failures_metric``)."""
    replaces: str | None = None
    """The generic group whose place it takes for its algorithm (GRPO's verifiers: ``env``): that
    group's keys in a config are read as this one's, with one warning line naming the new keys."""
    check: str | None = None
    """``module:function`` of ``(RunConfig) -> None``: refuses in one line, before Ray starts, a
    run the group's workers cannot serve."""

    @property
    def failures_metric(self) -> str:
        """The metric counting failed calls to its workers over the whole run."""
        return f"{self.metric_prefix}_worker_failures"


@dataclass(frozen=True)
class Algorithm:
    name: str
    config: type[AlgorithmSection]
    """Its ``algo:`` section (``algo.name`` picks it)."""
    deployable_policy: str
    """``module:function`` of ``(RunConfig, SavedState) -> nn.Module``: the deterministic policy
    of a checkpoint, raw observations in, env actions out."""
    runners: dict[str, str] = field(default_factory=dict)
    """``module:Class`` of its ``Runner``, by what it learns from (``ENVS``, ``LOGGED_DATA``,
    ``JAX``, ``JAX_NATIVE_ENVS``)."""
    collector: str | None = None
    """``module:function`` of ``(collect.base.CollectorInputs) -> collect.base.Collector``: the
    one builder of its collector, over a rank's own envs (its runner's, acting with the live
    modules) and over a Ray env worker's part of them (acting with the worker's copies) alike;
    None: it collects from no envs."""
    acting: str | None = None
    """``module:function`` of ``(RunConfig, observation space, action space, device) -> modules
    by checkpoint name``: fresh copies of what its collector acts with, which a Ray env worker
    builds and loads each policy version's weights into."""
    memory_runners: tuple[str, ...] = ()
    """The keys of ``runners`` that train policies with memory (``model.memory``)."""
    evaluator: str = "distrl.eval.episodes:evaluate"
    """``module:function`` of ``(RunConfig, deployable policy, episodes, seed) -> list of
    returns``: how its policy is evaluated (the stop check, ``distrl eval``, eval workers); a
    policy with no online evaluation is refused there, in one line (``UserError``)."""
    evaluated_on: str = "distrl.eval.episodes:env_id"
    """``module:function`` of ``(RunConfig) -> str``: what its policy is evaluated on, as
    ``distrl eval`` names it (its JSON's ``env``)."""
    eval_line: str = EPISODES_LINE
    """``distrl eval``'s printed line, a ``str.format`` template of its JSON's keys (``env``,
    ``return_mean``, ``return_std``, ``episodes``, ``checkpoint``, ``chosen``: newest, best or
    given, ``global_step``)."""
    exports: dict[str, str] = field(default_factory=POLICY_FILES.copy)
    """``module:function`` of ``(deployable policy, observation space, format, out, where) ->
    None`` by the export format it writes (``distrl export --format``; ``output.path`` writes
    the one its suffix names, else the first)."""
    export_check: str = "distrl.io.export:check_can_export"
    """``module:function`` of ``(format, out, where) -> None``: refuses, in one line, what cannot
    be written to ``out`` (a missing extra, an unwritable place) before any work."""
    periodic_eval: str | None = None
    """``module:function`` of ``(RunConfig, deployable policy, episodes, seed) -> {metric: a value
    per episode}``: what the loop evaluates every ``eval.every`` updates of a run without eval
    workers, logging each metric's mean over ``eval.episodes`` episodes split over the ranks
    (GRPO's ``heldout/*``); None: such a run evaluates only for ``train.stop_return``."""
    best_metric: str = "stop_check_return"
    """The metrics row's key whose highest value marks the best checkpoint
    (``checkpoint.keep_best``): a score of the ranks' own weights at that update (by default the
    stop check's return; GRPO's held-out exact match)."""
    worker_groups: tuple[WorkerGroup, ...] = ()
    """Ray mode's worker groups of its own, each in the place of the generic group it
    ``replaces`` (``ray.groups.WORKER_GROUPS``), else after the generic ones: its runs' config
    has their keys (``config.run.workers_config``) and its runner asks for them by name."""
    learner_parameters: str | None = None
    """``module:function`` of ``(RunConfig) -> learner_memory.LearnerParameters``: its learner's
    parameters, counted without making weights (``distrl config``'s memory lines); None: not
    shown."""
    input_check: str = "distrl.envs:check_config_env"
    """``module:function`` of ``(RunConfig) -> None``: builds what it learns from once, so a bad
    env or task fails in one line before any process group or run dir."""
