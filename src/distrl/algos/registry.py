"""The algorithm registry: what an algorithm is, by ``algo.name``.

An algorithm is its config section, its runners (how it trains, by what it learns from), how
its deployable policy is built from a checkpoint, how it collects from envs and what it acts
with there (one builder for a rank's own envs and an env worker's part of them), how its policy
is evaluated (in the loop, too) and how ``distrl eval`` describes the result, the file formats
its policy is exported in (``distrl export``, ``output.path``) and Ray mode's worker groups of
its own (``WorkerGroup``). Everything but the config section is named as
``module:attribute`` and imported only when used, so reading a config imports no torch, and
evaluation, export and the workers build a policy without importing any runner; the command
line asks the registry, never the policy's type. A new algorithm is one package in
``distrl.algorithms`` plus one catalogue line below naming its entry; one defined outside distrl
is named by ``algo.name: module:ATTRIBUTE`` (an ``Algorithm``), with no line here.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
from collections.abc import Iterator, Mapping
from typing import Any

from distrl.algos.algorithm import (
    ENVS,
    JAX,
    JAX_NATIVE_ENVS,
    LOGGED_DATA,
    Algorithm,
    WorkerGroup,
)
from distrl.algos.grpo_config import GRPOConfig
from distrl.algos.ppo_config import PPOConfig
from distrl.config.algorithm import AlgorithmSection
from distrl.errors import UserError
from distrl.user_code import load

__all__ = [
    "ALGORITHMS",
    "ENVS",
    "JAX",
    "JAX_NATIVE_ENVS",
    "LOGGED_DATA",
    "Algorithm",
    "WorkerGroup",
    "algorithm",
]
"""What plug-ins import from here (``Algorithm``, ``WorkerGroup`` and the kinds of data are
``algos.algorithm``'s, kept importable from the registry)."""


class Catalogue(Mapping[str, Algorithm]):
    """The algorithms by ``algo.name``: an ``Algorithm``, or the ``module:ATTRIBUTE`` naming the
    entry of an algorithm package (``distrl.algorithms.<name>:ALGORITHM``), imported the
    first time it is looked up. Iterating the names imports nothing."""

    def __init__(self, entries: dict[str, Algorithm | str]) -> None:
        self._entries = entries

    def __getitem__(self, name: str) -> Algorithm:
        entry = self._entries[name]
        if isinstance(entry, str):
            entry = self._entries[name] = load(entry)
        return entry

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)


ALGORITHMS = Catalogue({
    algorithm.name: algorithm
    for algorithm in (
        Algorithm(
            "ppo",
            PPOConfig,
            deployable_policy="distrl.models.policies:ppo_policy",
            runners={
                ENVS: "distrl.runners.on_policy:OnPolicyRunner",
                JAX: "distrl.runners.jax_on_policy:JaxOnPolicyRunner",
                JAX_NATIVE_ENVS: "distrl.runners.jax_compiled:JaxCompiledRunner",
            },
            collector="distrl.collect.rollout:actor_critic_collector",
            acting="distrl.collect.rollout:actor_critic_copies",
            memory_runners=(ENVS,),
            learner_parameters="distrl.models.policies:actor_critic_parameters",
        ),
    )
} | {
    "dqn": "distrl.algorithms.dqn:ALGORITHM",
    "a2c": "distrl.algorithms.a2c:ALGORITHM",
    "appo": "distrl.algorithms.appo:ALGORITHM",
    "sac": "distrl.algorithms.sac:ALGORITHM",
    "iql": "distrl.algorithms.iql:ALGORITHM",
} | {
    algorithm.name: algorithm
    for algorithm in (
        Algorithm(
            "grpo",
            GRPOConfig,
            deployable_policy="distrl.models.sequence_policy:sequence_policy",
            runners={ENVS: "distrl.runners.grpo:GRPORunner"},
            learner_parameters="distrl.models.sequence_policy:sequence_model_parameters",
            evaluator="distrl.eval.completions:evaluate_completions",
            evaluated_on="distrl.eval.completions:task_name",
            eval_line=(
                "{env}: held-out exact match {return_mean:.3f} over {episodes} prompts, greedy "
                "({chosen} checkpoint {checkpoint})"
            ),
            exports={"transformers": "distrl.models.transformers_export:export_transformers"},
            export_check="distrl.models.transformers_export:check_can_export_transformers",
            periodic_eval="distrl.eval.completions:held_out_metrics",
            best_metric="heldout/exact_match",
            worker_groups=(
                WorkerGroup(
                    "verifier",
                    "Verifier workers in all, shared out over the learners: each scores a part of its "
                    "learner's completions with the task's reward functions (slow verifiers beside the "
                    "learners); 0: learners score their own completions.",
                    actor="distrl.ray.verifier_workers:VerifierWorker",
                    calls="distrl.ray.verifier_workers:RayVerifierWorkers",
                    shared_out=True,
                    metric_prefix="verifier",
                    replaces="env",
                ),
                WorkerGroup(
                    "prompt",
                    "Prompt workers in all, shared out over the learners: they serve each learner its "
                    "share of every step's prompts (a large prompt set read beside the learners); 0: "
                    "learners draw their own prompts.",
                    actor="distrl.ray.prompt_workers:PromptWorker",
                    calls="distrl.ray.prompt_workers:RayPromptWorkers",
                    shared_out=True,
                    metric_prefix="prompt",
                    replaces="data",
                ),
                WorkerGroup(
                    "generation",
                    "Generation workers in all, shared out over the learners: each generates a part of its "
                    "learner's completions with a copy of its policy, collect.lag steps ahead of training "
                    "(asynchronous GRPO); 0: learners generate their own completions.",
                    actor="distrl.ray.generation_workers:GenerationWorker",
                    calls="distrl.ray.generation_workers:RayGenerationWorkers",
                    shared_out=True,
                    metric_prefix="generation",
                ),
            ),
            input_check="distrl.algos.grpo_check:check_task",
        ),
    )
} | {"td3": "distrl.algorithms.td3:ALGORITHM"})  # fmt: skip


ENTRY_POINT_GROUP = "distrl.algorithms"
"""The entry-point group an installed package registers its algorithms under, by name:
``[project.entry-points."distrl.algorithms"] ddpg = "mypkg.ddpg:ALGORITHM"``."""


def installed_algorithms() -> dict[str, str]:
    """``module:ATTRIBUTE`` of the algorithms installed packages register (``ENTRY_POINT_GROUP``),
    by name; distrl's own names come first and are not among them."""
    found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    return {entry.name: entry.value for entry in found if entry.name not in ALGORITHMS}


def algorithm(name: str) -> Algorithm:
    """The algorithm ``algo.name`` names: one of distrl's, one an installed package registers by
    name, or ``module:ATTRIBUTE`` of one defined outside distrl (the module imported now, every
    reference of it checked once)."""
    if name in ALGORITHMS:
        return ALGORITHMS[name]
    if ":" in name:
        return _outside_algorithm(name)
    installed = installed_algorithms()
    if name in installed:
        return dataclasses.replace(_outside_algorithm(installed[name]), name=name)
    raise UserError(
        f"algo.name {name!r}: expected one of {', '.join([*ALGORITHMS, *installed])}, or module:ATTRIBUTE "
        "of an Algorithm defined outside distrl",
        code="algo-name-unknown",
    )


@functools.cache
def _outside_algorithm(name: str) -> Algorithm:
    """An algorithm defined outside distrl, its mistakes found now rather than once training runs:
    every ``module:attribute`` it names imports and exists, and its runners can be made."""
    setting = f"algo.name {name!r}"
    found = load(name, setting)
    if not isinstance(found, Algorithm) or not issubclass(found.config, AlgorithmSection):
        raise UserError(
            f"{setting}: expected a distrl.algos.registry.Algorithm whose config subclasses "
            f"AlgorithmSection, got {type(found).__name__}",
            code="algo-not-an-algorithm",
        )
    for field_name, reference in _references(found):
        loaded = load(reference, f"{setting}: Algorithm.{field_name} {reference!r}")
        if field_name.startswith("runners["):
            _check_runner(loaded, f"{setting}: Algorithm.{field_name} {reference!r}")
        elif not callable(loaded):
            raise UserError(
                f"{setting}: Algorithm.{field_name} {reference!r} is not callable", code="plugin-not-callable"
            )
    return dataclasses.replace(found, name=name)


def _references(found: Algorithm) -> list[tuple[str, str]]:
    """Every ``module:attribute`` an ``Algorithm`` names, by the field that names it."""
    named = [(f"runners[{key!r}]", reference) for key, reference in found.runners.items()]
    named += [(f"exports[{key!r}]", reference) for key, reference in found.exports.items()]
    for field_name in (
        "deployable_policy", "collector", "acting", "evaluator", "evaluated_on", "export_check",
        "periodic_eval", "learner_parameters", "input_check",
    ):  # fmt: skip
        if (reference := getattr(found, field_name)) is not None:
            named.append((field_name, reference))
    for group in found.worker_groups:
        named += [(f"worker_groups[{group.name!r}].{key}", getattr(group, key)) for key in ("actor", "calls")]
        if group.check is not None:
            named.append((f"worker_groups[{group.name!r}].check", group.check))
    return named


def _check_runner(runner: Any, where: str) -> None:
    """A runner class distrl's loop can make: a ``Runner`` with every abstract method written and
    every class attribute its bases declare as ``ClassVar`` without a value set."""
    # By name: the runners' layer sits above this one, which may not import it.
    bases = {f"{base.__module__}.{base.__qualname__}" for base in getattr(runner, "__mro__", ())}
    if not isinstance(runner, type) or "distrl.runners.base.Runner" not in bases:
        raise UserError(
            f"{where}: expected a subclass of distrl.runners.base.Runner, got {runner!r}",
            code="plugin-runner-not-a-runner",
        )
    unset = {
        name
        for base in runner.__mro__
        for name, annotation in vars(base).get("__annotations__", {}).items()
        if str(annotation).startswith("ClassVar") and not hasattr(runner, name)
    }
    if unset:
        raise UserError(
            f"{where}: {runner.__name__} does not set {', '.join(sorted(unset))} (declared in its bases)",
            code="plugin-runner-attribute-unset",
        )
    if missing := sorted(getattr(runner, "__abstractmethods__", ())):
        undefined = ", ".join(missing)
        raise UserError(
            f"{where}: {runner.__name__} does not define {undefined} (abstract in its bases)",
            code="plugin-runner-abstract",
        )
