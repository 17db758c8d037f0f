"""A checkpoint written before the re-layout (commit f5f5ee0, a 1,024-step CartPole PPO run kept
in tests/data) still evaluates and resumes, replicated or on sharded ranks: the checkpoint
format did not change."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import CARTPOLE, REPO, distrl, train_ranks

OLD_RUN = REPO / "tests" / "data" / "run_f5f5ee0"


@pytest.mark.slow
def test_a_checkpoint_from_before_the_relayout_evaluates_and_resumes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(OLD_RUN, run)
    evaluated = distrl("eval", "--checkpoint", str(run), "--episodes", "2", "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)["global_step"] == 1024
    resumed = distrl(
        "train", "--config", str(CARTPOLE), "--run-dir", str(run), "--resume", "--total-steps", "2048",
        "train.stop_return=null", "checkpoint.interval_steps=512", "log.tensorboard=false",
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["global_step"] for row in rows] == [1536, 2048]  # continued from step 1,024
    state = json.loads((run / "checkpoints" / "step_000000002048" / "state.json").read_text())
    assert state["launch_index"] == 1


def test_a_checkpoint_from_before_sharding_resumes_on_two_sharded_ranks(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(OLD_RUN, run)
    resumed = train_ranks(
        2, "--config", str(CARTPOLE), "--run-dir", str(run), "--resume", "--total-steps", "2048",
        "train.stop_return=null", "checkpoint.interval_steps=512", "log.tensorboard=false",
        "train.sharding=fsdp",
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [row["global_step"] for row in rows] == [1536, 2048]
    newest = sorted((run / "checkpoints").glob("step_*"))[-1]
    assert len(list(newest.glob("model/shard-*.safetensors"))) == 2
