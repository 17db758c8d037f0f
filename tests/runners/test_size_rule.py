"""The size rule on real process groups: env.num_envs and algo.minibatch_size are global, so 1, 2
and 3 ranks take the same optimiser steps on the same global minibatch size (docs/concepts/sizes.md,
"The PPO minibatch rule"). 7 envs x 4 rollout steps = 28 samples per update, minibatch_size 8 ->
round(3.5) = 4 minibatches of 7 samples per epoch, split over the ranks with remainders."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from distrl.comm import TorchComm
from distrl.config.run import load_config
from distrl.entry import build_training
from distrl.errors import UserError
from distrl.runners.base import RunContext
from distrl.runners.on_policy import OnPolicyRunner
from distrl.storage.rollout import RolloutBatch
from tests.distributed import run_ranks

UPDATES, EPOCHS = 3, 2
SIZES = ["env.num_envs=7", "algo.rollout_steps=4", "algo.minibatch_size=8", f"algo.update_epochs={EPOCHS}"]
QUIET = ["train.stop_return=null", "log.tensorboard=false", "log.progress=false"]


def _train_and_record(comm: TorchComm, overrides: list[str], out: Path) -> None:
    cfg = load_config(None, [*overrides, *QUIET])
    loop = build_training(cfg, comm, torch.device("cpu"), out / "run")
    runner = loop.runner
    sizes: list[int] = []
    minibatch_step = runner.algo.minibatch_step

    def recorded_step(mb: RolloutBatch) -> dict[str, float]:
        sizes.append(len(mb))
        return minibatch_step(mb)

    runner.algo.minibatch_step = recorded_step
    loop.run()
    adam_steps = {int(s["step"]) for s in runner.algo.optimizer.state_dict()["state"].values()}
    record = {"envs": runner.num_envs, "minibatch_sizes": sizes, "adam_steps": sorted(adam_steps)}
    (out / f"rank{comm.rank}.json").write_text(json.dumps(record))


@pytest.mark.parametrize(
    ("world_size", "envs_per_rank", "rank_minibatch_sizes"),
    [(1, [7], [7]), (2, [4, 3], [4, 3]), (3, [3, 2, 2], [3, 2, 2])],
    ids=["1-rank", "2-ranks", "3-ranks-remainder"],
)
@pytest.mark.slow
def test_global_sizes_give_every_rank_count_the_same_optimiser_steps(
    tmp_path: Path, world_size: int, envs_per_rank: list[int], rank_minibatch_sizes: list[int]
) -> None:
    overrides = [*SIZES, f"train.total_steps={UPDATES * 28}"]
    if world_size == 1:
        _train_and_record(TorchComm(), overrides, tmp_path)
    else:
        run_ranks(_train_and_record, world_size, overrides, tmp_path)
    records = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(world_size)]
    steps = UPDATES * EPOCHS * 4
    assert [r["envs"] for r in records] == envs_per_rank
    for record, size in zip(records, rank_minibatch_sizes, strict=True):
        # 4 optimiser steps per epoch on every rank, each on this rank's share of the minibatch.
        assert record["minibatch_sizes"] == [size] * steps
        assert record["adam_steps"] == [steps]
    assert sum(rank_minibatch_sizes) == 7  # the global minibatch is the same on every rank count


@pytest.mark.slow
def test_per_rank_envs_grow_the_number_of_minibatches(tmp_path: Path) -> None:
    """env.num_envs_per_rank=4 on 2 ranks: 32 samples per update -> 4 minibatches of 8 (4 + 4)."""
    overrides = [*SIZES, "env.num_envs=null", "env.num_envs_per_rank=4", "train.total_steps=64"]
    run_ranks(_train_and_record, 2, overrides, tmp_path)
    for rank in range(2):
        record = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert record["minibatch_sizes"] == [4] * (2 * EPOCHS * 4)


def _expect_minibatch_error(comm: TorchComm) -> None:
    overrides = ["env.num_envs=2", "algo.rollout_steps=1", "algo.minibatch_size=1", *QUIET]
    with pytest.raises(UserError, match=r"algo.minibatch_size=1 gives 2 minibatches per epoch, more than"):
        OnPolicyRunner(RunContext(load_config(None, overrides), comm, torch.device("cpu")))


@pytest.mark.slow
def test_minibatches_smaller_than_one_sample_per_rank_are_refused_on_every_rank() -> None:
    run_ranks(_expect_minibatch_error, 2)
