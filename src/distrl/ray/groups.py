"""Ray mode's generic worker groups beside the learners, declared once (``WorkerGroup``): env,
eval and data workers. An algorithm declares groups of its own in its registry entry
(``Algorithm.worker_groups``: GRPO's verifier and prompt workers); the run's groups are those its
``workers:`` section sizes (``config.run.workers_config``), in bundle order. The driver starts
them from here and each learner wraps its share from here; their sizes and CPUs are the config's
``workers.<group>`` and ``workers.cpus_per_<group>``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from distrl.algos.algorithm import ENVS, LOGGED_DATA, WorkerGroup
from distrl.algos.registry import algorithm
from distrl.config.run_algorithm import learns_from
from distrl.config.sections import GENERIC_WORKER_GROUPS
from distrl.errors import UserError

if TYPE_CHECKING:
    from distrl.config.run import RunConfig


def check_env_workers(cfg: RunConfig) -> None:
    """Env workers collect whole rollouts online, for a torch learner."""
    if learns_from(cfg) != ENVS:
        raise UserError(
            "workers.env: env workers collect for online PPO and DQN with ml_framework: torch; "
            "set workers.env=0",
            code="ray-env-workers-unsupported",
        )
    if cfg.train.straggler_threshold is not None:
        raise UserError(
            "train.straggler_threshold: env workers always collect whole rollouts; "
            "unset it or set workers.env=0",
            code="ray-env-workers-straggler",
        )


def check_data_workers(cfg: RunConfig) -> None:
    """Data workers read a logged dataset for a torch learner."""
    if learns_from(cfg) != LOGGED_DATA:
        raise UserError(
            "workers.data: data workers read data.path for offline DQN; set data.path or workers.data=0",
            code="ray-data-workers-without-data",
        )


WORKER_GROUPS: dict[str, WorkerGroup] = {
    group.name: group
    for group in (
        WorkerGroup(
            "env",
            GENERIC_WORKER_GROUPS["env"],
            actor="distrl.ray.env_workers:EnvWorker",
            calls="distrl.ray.env_workers:RayEnvWorkers",
            shared_out=True,
            metric_prefix="env",
            check="distrl.ray.groups:check_env_workers",
        ),
        WorkerGroup(
            "eval",
            GENERIC_WORKER_GROUPS["eval"],
            actor="distrl.ray.eval_workers:EvalWorker",
            calls="distrl.ray.eval_workers:RayEvalWorkers",
            shared_out=False,
            metric_prefix="eval",
        ),
        WorkerGroup(
            "data",
            GENERIC_WORKER_GROUPS["data"],
            actor="distrl.ray.data_workers:DataWorker",
            calls="distrl.ray.data_workers:RayDataWorkers",
            shared_out=True,
            metric_prefix="data",
            check="distrl.ray.groups:check_data_workers",
        ),
    )
}
"""By name, in bundle order (``ray.placement``)."""


def run_groups(cfg: RunConfig) -> dict[str, WorkerGroup]:
    """The run's worker groups beside the learners by name, in bundle order: those its
    ``workers:`` section sizes, each as its algorithm declares it, else the generic one."""
    own = {group.name: group for group in algorithm(cfg.algo.name).worker_groups}
    return {name: own.get(name) or WORKER_GROUPS[name] for name in cfg.workers.group_names()}
