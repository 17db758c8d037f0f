"""The rules that span a run's config sections, in one place: checked once the config is read
(``config.run.load_config``), before anything starts; a section's rules of its own are its own
validators. Rules that need what only a launcher knows (Ray mode's workers, collector processes)
are checked where it is known (``collect.ahead``'s table, ``ray.driver.check_workers``)."""

from __future__ import annotations

from typing import Any, Protocol

from distrl.config.algorithm import AlgorithmSection
from distrl.config.sections import CollectConfig, NormalizeConfig, TrainConfig
from distrl.errors import UserError


class ReadRun(Protocol):
    """What the rules read of a run's config (``config.run.RunConfig``)."""

    algo: AlgorithmSection
    train: TrainConfig
    collect: CollectConfig
    normalize: NormalizeConfig
    workers: Any
    ml_framework: str


def check_across_sections(cfg: ReadRun, source: str) -> None:
    """Every rule that spans sections, each said in one line naming ``source`` (the config file)."""
    _check_switches_honoured(cfg, source)
    _check_collectors_apart(cfg, source)
    _check_sharding(cfg, source)


def _check_collectors_apart(cfg: ReadRun, source: str) -> None:
    """Collecting ahead of the learner needs collectors apart from it: collector processes, or
    Ray mode's env workers (the launcher, checked where it is known, decides which)."""
    ahead = cfg.collect.ahead()
    if ahead and not cfg.collect.processes and not collecting_workers(cfg):
        raise UserError(
            f"{source}: {ahead} needs collect.processes of 1 or more, or Ray mode's env or generation "
            "workers (workers.env, workers.generation); with none the learner collects itself",
            code="collect-ahead-without-collectors",
        )


def _check_sharding(cfg: ReadRun, source: str) -> None:
    """What sharded learners cannot do yet, each said in one line: every rank must run the same
    forward passes, and the weights exist whole only while the ranks gather them together."""
    sharding = cfg.train.sharding
    if sharding == "none":
        if cfg.train.hold_unsharded_gradients:
            raise UserError(
                f"{source}: train.hold_unsharded_gradients=true is for sharded learners "
                "(train.sharding=fsdp or hsdp); a replicated learner's gradients are whole already",
                code="sharding-hold-gradients-unsharded",
            )
        return
    refused = {
        "ml_framework: jax (JAX learners are replicated)": cfg.ml_framework == "jax",
        "train.compile=true": cfg.train.compile,
        f"train.straggler_threshold={cfg.train.straggler_threshold} (ranks must step alike)": (
            cfg.train.straggler_threshold is not None
        ),
        f"collect.processes={cfg.collect.processes}": cfg.collect.processes > 0,
        "Ray mode's env, generation or eval workers": collecting_workers(cfg) + cfg.workers.eval > 0,
    }
    for what, present in refused.items():
        if present:
            raise UserError(
                f"{source}: train.sharding={sharding} does not work with {what}; use train.sharding=none",
                code="sharding-unsupported-with",
            )


def collecting_workers(cfg: ReadRun) -> int:
    """Ray mode's workers that collect for the learners (env workers; GRPO's generation workers)."""
    return sum(getattr(cfg.workers, group, 0) for group in ("env", "generation"))


TRAIN_SWITCHES = (
    "compile", "activation_checkpointing", "gradient_accumulation_steps", "optimizer_offload", "sharding",
    "hold_unsharded_gradients",
)  # fmt: skip
"""``train`` keys an algorithm must honour to be given them (``honoured_train_switches``) unless
they are at their defaults."""


def _check_switches_honoured(cfg: ReadRun, source: str) -> None:
    """Said rather than silently ignored: a user who asks for compilation (or checkpointing)
    expects it to happen.
    Checked on what the user gives, not on configs saved in checkpoints before this rule."""
    if cfg.train.compile and cfg.ml_framework == "jax":
        raise UserError(
            f"{source}: train.compile=true is for torch learners; JAX learners are always compiled: "
            "set train.compile=false",
            code="train-compile-jax",
        )
    for switch in TRAIN_SWITCHES:
        value, default = getattr(cfg.train, switch), TrainConfig.model_fields[switch].default
        if value != default and switch not in cfg.algo.honoured_train_switches:
            shown = str(value).lower() if isinstance(value, bool) else value
            raise UserError(
                f"{source}: train.{switch}={shown} is not supported by algo.name={cfg.algo.name}; "
                f"leave it at {str(default).lower() if isinstance(default, bool) else default}",
                code="config-train-switch-unsupported",
            )
    if (cfg.normalize.observations or cfg.normalize.rewards) and not cfg.algo.normalizes:
        raise UserError(
            f"{source}: normalize.observations and normalize.rewards are for PPO, A2C and APPO (their "
            f"running normalisers); set them false for algo.name={cfg.algo.name}",
            code="algo-normalize-ppo-only",
        )
