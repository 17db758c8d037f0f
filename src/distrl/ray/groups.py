"""Ray mode's worker groups beside the learners, declared once: each group's actor, what a
learner calls its share through, and how the group is shared out over the learners. The
driver starts them from here and each learner wraps its share from here; their sizes and CPUs
are the config's ``workers.<group>`` and ``workers.cpus_per_<group>``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class WorkerGroup:
    actor: str
    """``module:Class`` of the group's actor."""
    calls: str
    """``module:Class`` a learner calls its share of the group through (its ``RemoteWorkers`` field)."""
    shared_out: bool
    """Split over the learners (each steps or reads a part of its own); else all rank 0's."""


WORKER_GROUPS: dict[str, WorkerGroup] = {
    "env": WorkerGroup(
        "distrl.ray.env_workers:EnvWorker", "distrl.ray.env_workers:RayEnvWorkers", shared_out=True
    ),
    "eval": WorkerGroup(
        "distrl.ray.eval_workers:EvalWorker", "distrl.ray.eval_workers:RayEvalWorkers", shared_out=False
    ),
    "data": WorkerGroup(
        "distrl.ray.data_workers:DataWorker", "distrl.ray.data_workers:RayDataWorkers", shared_out=True
    ),
}
"""By name, in bundle order (``ray.placement``)."""


def worker_group(algorithm_name: str, group: str) -> WorkerGroup:
    """``group`` as ``algorithm_name`` fills it: its own workers where the algorithm registers
    some (``Algorithm.ray_workers``: GRPO's env workers score completions), else the default."""
    from distrl.algos.registry import algorithm

    default = WORKER_GROUPS[group]
    own = algorithm(algorithm_name).ray_workers.get(group)
    return default if own is None else WorkerGroup(*own, shared_out=default.shared_out)
