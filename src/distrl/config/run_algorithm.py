"""What a run's algorithm does for it, asked of its config: what it learns from, its runner, its
evaluators, its export, its up-front input check; each answered from the catalogue
(``algos.registry``), whose ``module:attribute`` strings are imported here only when used. Above the
run's config (``config.run``), which these take whole."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from distrl import extras
from distrl.algos.algorithm import ENVS, JAX, JAX_NATIVE_ENVS, LOGGED_DATA
from distrl.algos.registry import ALGORITHMS, algorithm
from distrl.env_backends import ENV_BACKENDS
from distrl.errors import UserError
from distrl.extras import require_extra
from distrl.user_code import load

if TYPE_CHECKING:
    from pathlib import Path

    import gymnasium as gym
    from torch import nn

    from distrl.config.run import RunConfig


def learns_from(cfg: RunConfig) -> str:
    """What the run learns from, with which learner: the key of its runner."""
    if cfg.ml_framework == "jax":
        return JAX_NATIVE_ENVS if ENV_BACKENDS[cfg.env.backend].jax_native else JAX
    return LOGGED_DATA if cfg.data.path is not None else ENVS


def runner_reference(cfg: RunConfig) -> str:
    """``module:Class`` of the ``Runner`` that trains ``cfg``'s algorithm from what it learns
    from; one line when it has none (checked before anything starts, nothing imported)."""
    source = learns_from(cfg)
    known = algorithm(cfg.algo.name)
    able = [name for name, other in {**ALGORITHMS, known.name: known}.items() if source in other.runners]
    if cfg.algo.name not in able or (source in (JAX, JAX_NATIVE_ENVS) and cfg.data.path is not None):
        if source in (JAX, JAX_NATIVE_ENVS):
            raise UserError(
                f"ml_framework: jax trains {', '.join(able)} online; use torch for this run",
                code="jax-algorithm-unsupported",
            )
        where = "from logged data (data.path)" if source == LOGGED_DATA else "online"
        raise UserError(
            f"algo.name={cfg.algo.name} does not train {where}; known: {', '.join(able)}",
            code="algo-cannot-learn-from",
        )
    if cfg.model.memory != "none" and source not in known.memory_runners:
        learner = "the JAX learner" if source in (JAX, JAX_NATIVE_ENVS) else f"algo.name={known.name}"
        with_memory = [name for name, a in ALGORITHMS.items() if a.memory_runners]
        raise UserError(
            f"model.memory={cfg.model.memory}: {learner} has no recurrent policies yet; use "
            f"model.memory=none, or {' or '.join(with_memory)} with ml_framework: torch",
            code="algo-memory-unsupported",
        )
    return known.runners[source]


def check_acting(cfg: RunConfig, setting: str, who: str) -> None:
    """Processes that collect for a rank act with fresh copies of its modules
    (``Algorithm.acting``): one line, before any starts, for an algorithm that declares none."""
    if cfg.algorithm.acting is None:
        raise UserError(
            f"{setting}: algo.name={cfg.algo.name} declares no Algorithm.acting, the fresh copies of "
            f"what its collector acts with that {who} load each policy version's weights into; "
            f"declare one (docs/algorithms/your-own.md) or collect in the learner's own process",
            code="plugin-no-acting",
        )


def runner_class(cfg: RunConfig) -> type:
    """The ``Runner`` that trains ``cfg``'s algorithm, its module imported now."""
    reference = runner_reference(cfg)
    if learns_from(cfg) in (JAX, JAX_NATIVE_ENVS):
        require_extra(*extras.JAX)
    return load(reference)


def evaluator(cfg: RunConfig) -> Any:
    """The function that evaluates ``cfg``'s deployable policy (``Algorithm.evaluator``)."""
    return load(algorithm(cfg.algo.name).evaluator)


def periodic_evaluator(cfg: RunConfig) -> Any | None:
    """The function the loop evaluates ``cfg``'s policy with every ``eval.every`` updates when
    no eval workers do (``Algorithm.periodic_eval``); None when its algorithm has none."""
    reference = algorithm(cfg.algo.name).periodic_eval
    return None if reference is None else load(reference)


def output_format(cfg: RunConfig, out: Path) -> str:
    """The format ``output.path`` is written in: the one its suffix names among those ``cfg``'s
    algorithm writes (``.onnx``), else its first."""
    formats = algorithm(cfg.algo.name).exports
    return out.suffix[1:] if out.suffix[1:] in formats else next(iter(formats))


def check_export(cfg: RunConfig, fmt: str, out: Path, where: str) -> None:
    """Refuse in one line, before any work, what ``cfg``'s algorithm cannot write as ``fmt`` to
    ``out`` (``Algorithm.export_check``); ``fmt`` is one of its ``exports``."""
    load(algorithm(cfg.algo.name).export_check)(fmt, out, where)


def export(
    cfg: RunConfig, policy: nn.Module, observation_space: gym.Space, fmt: str, out: Path, where: str
) -> None:
    """Write ``cfg``'s deployable ``policy`` as ``fmt`` to ``out``, checked first."""
    check_export(cfg, fmt, out, where)
    load(algorithm(cfg.algo.name).exports[fmt])(policy, observation_space, fmt, out, where)


def check_inputs(cfg: RunConfig) -> None:
    """Build what ``cfg``'s algorithm learns from once (``Algorithm.input_check``)."""
    load(algorithm(cfg.algo.name).input_check)(cfg)
