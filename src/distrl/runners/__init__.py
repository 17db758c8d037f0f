"""Runners supply iterations to the shared loop (``loop.py``); one per algorithm family."""

from __future__ import annotations

from pathlib import Path

import torch

from distrl.comm import Comm
from distrl.config import RunConfig
from distrl.errors import UserError
from distrl.io import checkpoint as ckpt
from distrl.io.train_state import launch_index
from distrl.runners.base import RunContext, Runner
from distrl.runners.loop import TrainingLoop
from distrl.runners.off_policy import OffPolicyRunner
from distrl.runners.on_policy import OnPolicyRunner

RUNNERS: dict[str, type[Runner]] = {"ppo": OnPolicyRunner, "dqn": OffPolicyRunner}
"""``algo.name`` -> the runner that trains it."""


def runner_class(algorithm: str) -> type[Runner]:
    if algorithm not in RUNNERS:
        raise UserError(f"algorithm {algorithm!r} has no runner here (known: {', '.join(RUNNERS)})")
    return RUNNERS[algorithm]


def build_training(
    cfg: RunConfig,
    comm: Comm,
    device: torch.device,
    run_dir: Path,
    checkpoint: ckpt.CheckpointFiles | None = None,
) -> TrainingLoop:
    """The config's runner inside the shared loop, fresh or resumed from ``checkpoint``."""
    ctx = RunContext(cfg, comm, device, launch_index(checkpoint))
    return TrainingLoop(ctx, runner_class(cfg.algo.name)(ctx), run_dir, checkpoint)
