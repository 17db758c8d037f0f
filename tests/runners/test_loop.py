"""The training loop leaves the process as it found it: the preemption handlers it installs for
a run are taken down when the run ends, or fails to start, so an in-process run (a test, a
notebook) does not leave SIGTERM ignored. It keeps the checkpoint whose weights scored best at
the run's own checks beside the newest, and ``distrl eval --best`` evaluates it."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch

from distrl.comm import TorchComm
from distrl.config.run import load_config
from distrl.entry import build_training
from distrl.io import checkpoint as ckpt
from distrl.runners.loop import planned_steps
from tests.helpers import CARTPOLE, distrl


def test_an_in_process_run_restores_the_signal_handlers(tmp_path: Path) -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    cfg = load_config(
        CARTPOLE,
        ["train.total_steps=256", "env.num_envs=4", "algo.rollout_steps=64", "log.tensorboard=false"],
    )
    loop = build_training(cfg, TorchComm(), torch.device("cpu"), tmp_path)
    loop.run()
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_a_run_that_fails_to_start_restores_the_signal_handlers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    cfg = load_config(CARTPOLE, ["env.num_envs=4", "algo.rollout_steps=64", "log.tensorboard=false"])
    loop = build_training(cfg, TorchComm(), torch.device("cpu"), tmp_path)

    def fail(fresh: bool) -> None:
        raise RuntimeError("the envs did not start")

    monkeypatch.setattr(loop.runner, "start", fail)
    with pytest.raises(RuntimeError, match="the envs did not start"):
        loop.run()
    assert {sig: signal.getsignal(sig) for sig in before} == before


def train_with_a_stop_check_every_update(run: Path, steps: int, *overrides: str) -> None:
    """CartPole with a stop check after every update that never stops the run (its target is out
    of reach): each update's weights scored."""
    result = distrl(
        "train", "--config", str(CARTPOLE), "--run-dir", str(run), "--total-steps", str(steps),
        "train.stop_return=1000", "train.stop_check_every=1", "log.tensorboard=false", *overrides,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
def test_the_checkpoint_that_scored_best_is_kept_and_evaluated_with_best(tmp_path: Path) -> None:
    """The first update whose weights scored highest has its checkpoint, named in best.json and
    kept beside the newest (keep_last=1); `distrl eval --best` plays it and `distrl export --best`
    writes it out."""
    run = tmp_path / "run"
    train_with_a_stop_check_every_update(run, 4096, "eval.episodes=3", "checkpoint.keep_last=1")
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    scores = [row["stop_check_return"] for row in rows]
    assert len(set(scores)) > 1  # the score moved: which update was best is a real choice
    best_row = rows[scores.index(max(scores))]
    best = ckpt.checkpoint_dir_name(best_row["global_step"])
    assert ckpt.best_checkpoint(run / "checkpoints") == {
        "checkpoint": best, "metric": "stop_check_return", "value": max(scores),
        "global_step": best_row["global_step"],
    }  # fmt: skip
    newest = ckpt.checkpoint_dir_name(4096)
    assert [p.name for p in ckpt.list_checkpoints(run / "checkpoints")] == sorted({best, newest})
    chosen = {}
    for flags in (["--best"], []):
        evaluated = distrl("eval", "--checkpoint", str(run), "--episodes", "2", "--json", *flags)
        assert evaluated.returncode == 0, evaluated.stderr
        report = json.loads(evaluated.stdout)
        chosen[report["chosen"]] = (Path(report["checkpoint"]).name, report["global_step"])
    assert chosen == {"best": (best, best_row["global_step"]), "newest": (newest, 4096)}
    said = distrl("eval", "--checkpoint", str(run), "--episodes", "2", "--best").stdout
    assert f"(best checkpoint {run / 'checkpoints' / best})" in said, said
    out = tmp_path / "best.pt"
    exported = distrl(
        "export", "--checkpoint", str(run), "--best", "--format", "torchscript", "--out", str(out)
    )
    assert exported.returncode == 0 and out.is_file(), exported.stderr
    assert f"policy of the best checkpoint {run / 'checkpoints' / best} to {out}" in exported.stdout


@pytest.mark.slow
def test_without_keep_best_no_best_checkpoint_is_kept_and_asking_for_one_is_one_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    train_with_a_stop_check_every_update(run, 1024, "eval.episodes=2", "checkpoint.keep_best=false")
    assert ckpt.best_checkpoint(run / "checkpoints") is None
    assert [p.name for p in ckpt.list_checkpoints(run / "checkpoints")] == [ckpt.checkpoint_dir_name(1024)]
    refused = distrl("eval", "--checkpoint", str(run), "--best")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"distrl: error: no best checkpoint at {run}: the run kept none (checkpoint.keep_best is off, or "
        "no check of its own scored its weights: train.stop_return unset, or GRPO's held-out prompts "
        "scored by eval workers); its newest is evaluated without --best"
    ]


def test_the_budget_is_planned_in_whole_iterations_where_they_are_fixed() -> None:
    assert planned_steps(600, 0, 512) == 1024
    assert planned_steps(1024, 0, 512) == 1024
    assert planned_steps(1000, 300, 512) == 1324  # resumed off the grid: whole iterations from there
    assert planned_steps(600, 0, None) == 600  # iterations that vary: the budget
    assert planned_steps(600, 700, 512) == 600  # nothing left to take
