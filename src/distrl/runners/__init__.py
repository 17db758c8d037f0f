"""Runners supply iterations to the shared loop (``loop.py``); one per algorithm family."""

from __future__ import annotations

import importlib
from pathlib import Path

import torch

from distrl.comm import Comm
from distrl.config import RunConfig
from distrl.errors import UserError
from distrl.io import checkpoint as ckpt
from distrl.io.train_state import launch_index
from distrl.launch.jax_group import JAX_EXTRA
from distrl.runners.base import RemoteWorkers, RunContext, Runner
from distrl.runners.loop import TrainingLoop
from distrl.runners.off_policy import OffPolicyRunner
from distrl.runners.offline import OfflineRunner
from distrl.runners.on_policy import OnPolicyRunner

RUNNERS: dict[str, type[Runner]] = {"ppo": OnPolicyRunner, "dqn": OffPolicyRunner}
"""``algo.name`` -> the runner that trains it from envs."""
JAX_RUNNERS: dict[str, str] = {"ppo": "distrl.runners.jax_on_policy:JaxOnPolicyRunner"}
"""``algo.name`` -> the runner with a JAX learner (``ml_framework: jax``), imported only when used."""
COMPILED_JAX_RUNNERS: dict[str, str] = {"ppo": "distrl.runners.jax_compiled:JaxCompiledRunner"}
"""The same for JAX-native envs: rollout and update in one compiled step."""
JAX_NATIVE_BACKENDS = ("gymnax", "brax")
"""The ``env.backend`` values whose envs are JAX functions (``distrl.envs.jax_envs``)."""
OFFLINE_RUNNERS: dict[str, type[Runner]] = {"dqn": OfflineRunner}
"""``algo.name`` -> the runner that trains it from logged data (``data.path``)."""


def runner_class(
    algorithm: str, offline: bool = False, ml_framework: str = "torch", jax_native_envs: bool = False
) -> type[Runner]:
    if ml_framework == "jax":
        return _jax_runner_class(algorithm, offline, COMPILED_JAX_RUNNERS if jax_native_envs else JAX_RUNNERS)
    runners = OFFLINE_RUNNERS if offline else RUNNERS
    if algorithm not in runners:
        where = "from logged data (data.path)" if offline else "online"
        raise UserError(f"algo.name={algorithm} does not train {where}; known: {', '.join(runners)}")
    return runners[algorithm]


def _jax_runner_class(algorithm: str, offline: bool, runners: dict[str, str]) -> type[Runner]:
    if offline or algorithm not in runners:
        raise UserError(f"ml_framework: jax trains {', '.join(runners)} online; use torch for this run")
    module, name = runners[algorithm].split(":")
    try:
        return getattr(importlib.import_module(module), name)
    except ImportError:
        raise UserError(JAX_EXTRA) from None


def build_training(
    cfg: RunConfig,
    comm: Comm,
    device: torch.device,
    run_dir: Path,
    checkpoint: ckpt.CheckpointFiles | None = None,
    node_rank: int = 0,
    workers: RemoteWorkers | None = None,
    restart_count: int = 0,
) -> TrainingLoop:
    """The config's runner inside the shared loop, fresh or resumed from ``checkpoint``;
    ``workers``: processes that do part of the rank's work (Ray mode's worker groups);
    ``restart_count``: the launcher's restarts of the group so far."""
    ctx = RunContext(
        cfg, comm, device, launch_index(checkpoint), node_rank, workers or RemoteWorkers(), restart_count
    )
    runner = runner_class(
        cfg.algo.name,
        cfg.data.path is not None,
        cfg.ml_framework,
        jax_native_envs=cfg.env.backend in JAX_NATIVE_BACKENDS,
    )
    return TrainingLoop(ctx, runner(ctx), run_dir, checkpoint)
