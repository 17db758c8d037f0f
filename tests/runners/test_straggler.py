"""DD-PPO straggler preemption: a slow rank stops collecting once enough ranks are done, and the
update stays identical on every rank."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from distrl.comm import Comm
from distrl.io import checkpoint as ckpt
from distrl.runners.straggler import StragglerCutoff
from tests.distributed import run_ranks
from tests.helpers import CARTPOLE, train_ranks


def _cutoff_worker(comm: Comm, out: Path) -> None:
    cutoff = StragglerCutoff(comm, threshold=0.5, rollout_steps=16)
    assert cutoff.enabled
    assert not StragglerCutoff(comm, threshold=1.0, rollout_steps=16).enabled  # waits for all: off
    cutoff.begin(update_index=7)
    if comm.rank == 0:
        cutoff.finish()
    comm.barrier()
    if comm.rank == 1:
        # One of two ranks is done (>= ceil(0.5 * 2)); a quarter of the rollout is the minimum.
        assert not cutoff.should_stop(3)
        assert cutoff.should_stop(4)
        cutoff.begin(update_index=8)
        assert not cutoff.should_stop(4)  # a new update starts from zero arrivals
    comm.barrier()
    (out / f"rank{comm.rank}").write_text("ok")


def test_cutoff_counts_arrivals_per_update(tmp_path: Path) -> None:
    run_ranks(_cutoff_worker, 2, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rank0", "rank1"]


def test_single_process_never_cuts() -> None:
    cutoff = StragglerCutoff(Comm(), threshold=0.5, rollout_steps=16)
    cutoff.begin(0)
    assert not cutoff.enabled and not cutoff.should_stop(16)


@pytest.mark.slow
def test_slow_rank_is_cut_short_and_ranks_stay_identical(tmp_path: Path) -> None:
    result = train_ranks(
        2, "--config", str(CARTPOLE), "--run-dir", str(tmp_path), "--env", "tests.envs.toy:SlowOnRankEnv",
        "env.kwargs.delay_s=0.002", "--total-steps", "8192", "train.stop_return=null",
        "train.straggler_threshold=0.5",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    # Rank 1 is ~50x slower per step, so it is cut at a quarter of its rollout almost every
    # update: the global rollout is then (16 + 4) / 32 of the full one.
    fractions = [r["rollout_fraction"] for r in rows]
    assert sum(f < 0.8 for f in fractions) >= len(fractions) // 2, fractions
    assert rows[-1]["global_step"] >= 8192
    state = json.loads((ckpt.resolve_checkpoint(tmp_path) / "state.json").read_text())
    assert state["global_step"] == rows[-1]["global_step"]  # counts the samples really collected
    assert state["ranks"][0]["param_sha256"] == state["ranks"][1]["param_sha256"]
