"""A run directory on rank 0: refuse to clobber another run, record the resolved config, and
pick the checkpoint a resumed run continues from."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import yaml

from distrl.config.run import RunConfig, changed_keys, config_from_dict
from distrl.config.run_algorithm import check_export, output_format
from distrl.errors import UserError
from distrl.io import checkpoint as ckpt
from distrl.io.resume import ChosenCheckpoint

GENERIC_RESUME_FIXED_KEYS = (
    "algo.name",  # PPO and A2C build the same network, but another optimiser would read its state
    "env.id",  # two envs with the same spaces build the same network for different observations
    "ml_framework",  # torch and JAX write the same model tensors but not the same optimiser state
)
"""Keys no resumed run may change although they change no shape of what the checkpoint holds
(``train_state.restore`` refuses every change that does); each algorithm's config adds its own
(``resume_fixed_keys``). Checked before any process group starts."""


def prepare_run_dir(
    run_dir: Path, cfg: RunConfig, resume: bool, must_resume: bool, overwrite: bool
) -> ChosenCheckpoint | None:
    """Return the checkpoint to resume from, its path and files (None when starting fresh).

    ``resume``: continue when a checkpoint exists (``--resume``, or a restarted job);
    ``must_resume``: ``--resume`` was given, so a missing checkpoint is an error.
    """
    if cfg.output.path:  # found out now, not after hours of training
        out = Path(cfg.output.path)
        check_export(cfg, output_format(cfg, out), out, "output.path")
    existing = ckpt.list_checkpoints(run_dir / "checkpoints")
    chosen = None
    if resume and existing:
        chosen = newest_valid_checkpoint(existing, cfg)
    elif must_resume:
        raise UserError(
            f"--resume: no checkpoint in {run_dir / 'checkpoints'}; leave out --resume to start a new "
            "run there",
            code="resume-no-checkpoint",
        )
    elif existing and not overwrite:
        raise UserError(
            f"run dir {run_dir} already holds a run; pass --resume to continue it "
            "or --overwrite to replace it",
            code="run-dir-holds-run",
        )
    try:
        # A restarted process (torchrun's --max-restarts) of a run started with --overwrite
        # resumes: it must never wipe the checkpoints and metrics it continues from.
        if overwrite and chosen is None and run_dir.exists():
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(run_dir, exc) from None
    return chosen


def record_config(run_dir: Path, cfg: RunConfig) -> None:
    """Write the resolved config as ``config.yaml``: once a resumed run's checkpoint is restored,
    so that a refused resume leaves the config of the run it refused as it was."""
    try:
        (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))
    except OSError as exc:
        raise _unwritable(run_dir, exc) from None


def _unwritable(run_dir: Path, exc: OSError) -> UserError:
    return UserError(f"cannot write run dir {run_dir}: {exc.strerror or exc}", code="run-dir-unwritable")


def newest_valid_checkpoint(checkpoints: list[Path], cfg: RunConfig) -> ChosenCheckpoint:
    """Newest checkpoint that passes its checksums; corrupt ones are reported and skipped."""
    fixed_keys = (*GENERIC_RESUME_FIXED_KEYS, *cfg.algo.resume_fixed_keys)
    for path in reversed(checkpoints):
        try:
            files = ckpt.load_checkpoint(path)
        except UserError as exc:
            print(f"distrl: warning: skipping checkpoint {path}: {exc}", file=sys.stderr)
            continue
        # Read as today's config: a key added since the checkpoint was written has its default.
        saved = config_from_dict(json.loads(files["state.json"])["config"], str(path))
        changes = changed_keys(saved, cfg)
        for key in fixed_keys:
            if key in changes:
                was, now = changes[key]
                raise UserError(
                    f"checkpoint {path} was trained with {key}={was!r} but this config has {now!r}; "
                    "resuming needs the same env and network (use a new --run-dir to start over)",
                    code="resume-fixed-key-changed",
                )
        return path, files
    raise UserError(
        f"no valid checkpoint in {checkpoints[0].parent}: all {len(checkpoints)} are corrupt; "
        "start over with --overwrite or a new --run-dir",
        code="resume-all-checkpoints-corrupt",
    )
