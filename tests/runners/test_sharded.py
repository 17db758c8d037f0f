"""Sharded learners end to end (``train.sharding``): training that matches replicated training,
checkpoints each rank writes its shards of and any number of ranks resumes from, a commit that
notices a missing shard, and what sharding refuses in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from distrl.errors import UserError
from distrl.io import checkpoint as ckpt
from distrl.io import shards
from tests.algos.test_external_algorithm import plugins
from tests.helpers import (
    CARTPOLE,
    CARTPOLE_DQN,
    GRPO_REVERSE,
    PENDULUM_SAC,
    PENDULUM_TD3,
    REPO,
    distrl,
    train_ranks,
)

# 3 envs over 2 ranks: rank 0 holds twice rank 1's samples in every minibatch.
RUN = [
    "--config", str(CARTPOLE), "env.num_envs=3", "algo.rollout_steps=32", "algo.minibatch_size=32",
    "algo.update_epochs=2", "train.total_steps=960", "train.stop_return=null", "log.tensorboard=false",
    "log.progress=false", "checkpoint.interval_steps=480", "checkpoint.keep_last=5",
]  # fmt: skip
"""10 updates of 96 env steps."""


def newest(run_dir: Path) -> Path:
    return ckpt.list_checkpoints(run_dir / "checkpoints")[-1]


def model_tensors(checkpoint: Path) -> dict[str, torch.Tensor]:
    """A checkpoint's whole model tensors, sharded or not."""
    if (checkpoint / shards.MODEL_DIR).is_dir():
        return shards.read_whole(checkpoint / shards.MODEL_DIR)
    return ckpt.tensors_from_bytes((checkpoint / "model.safetensors").read_bytes())


def optimizer_tensors(checkpoint: Path) -> dict[str, torch.Tensor]:
    if (checkpoint / shards.OPTIMIZER_DIR).is_dir():
        return shards.read_whole(checkpoint / shards.OPTIMIZER_DIR)
    return ckpt.tensors_from_bytes((checkpoint / "optimizer.safetensors").read_bytes())


def assert_same(saved: dict[str, torch.Tensor], other: dict[str, torch.Tensor], atol: float = 0.0) -> None:
    assert saved.keys() == other.keys()
    for name, tensor in saved.items():
        np.testing.assert_allclose(other[name].numpy(), tensor.numpy(), atol=atol, rtol=0, err_msg=name)


@pytest.fixture(scope="module")
def sharded_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("sharded") / "run"
    done = train_ranks(2, *RUN, "--run-dir", str(run_dir), "train.sharding=fsdp")
    assert done.returncode == 0, done.stderr[-3000:]
    return run_dir


def test_sharded_training_takes_the_replicated_steps_and_no_rank_writes_the_whole(
    sharded_run: Path, tmp_path: Path
) -> None:
    replicated = tmp_path / "replicated"
    done = train_ranks(2, *RUN, "--run-dir", str(replicated))
    assert done.returncode == 0, done.stderr[-3000:]
    checkpoint = newest(sharded_run)
    assert not (checkpoint / "model.safetensors").exists()
    files = sorted(p.relative_to(checkpoint).as_posix() for p in checkpoint.rglob("*.safetensors"))
    assert len(files) == 4 and {f.split("/")[0] for f in files} == {"model", "optimizer"}  # a file a rank
    whole = model_tensors(checkpoint)
    assert_same(model_tensors(newest(replicated)), whole, atol=1e-6)
    assert_same(optimizer_tensors(newest(replicated)), optimizer_tensors(checkpoint), atol=1e-6)
    first = model_tensors(ckpt.list_checkpoints(sharded_run / "checkpoints")[0])
    assert max(float((whole[k] - first[k]).abs().max()) for k in whole) > 1e-3  # it trained


@pytest.mark.parametrize("ranks", [1, 3, 4])
def test_a_sharded_checkpoint_resumes_on_another_number_of_ranks(
    sharded_run: Path, tmp_path: Path, ranks: int
) -> None:
    """Resumed at its last step, the run only checkpoints again: on 3 or 4 ranks in as many
    shards, on 1 in one file, holding what the 2 ranks saved."""
    run_dir = tmp_path / "run"
    shutil.copytree(sharded_run, run_dir)
    saved = newest(run_dir)
    model, optimizer = model_tensors(saved), optimizer_tensors(saved)
    args = (
        *RUN,
        "--run-dir",
        str(run_dir),
        "--resume",
        "train.sharding=fsdp",
        f"env.num_envs={max(ranks, 3)}",
    )
    done = train_ranks(ranks, *args) if ranks > 1 else distrl("train", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resuming from" in done.stderr
    assert "Warning" not in done.stderr, done.stderr  # torch's about reading without a group: meant
    again = newest(run_dir)
    assert len(list(again.rglob("shard-*.safetensors"))) == (2 * ranks if ranks > 1 else 0)
    assert_same(model, model_tensors(again))
    assert_same(optimizer, optimizer_tensors(again))
    evaluated = distrl("eval", "--checkpoint", str(sharded_run), "--episodes", "2")
    assert evaluated.returncode == 0 and "over 2 deterministic episodes" in evaluated.stdout


def test_a_checkpoint_missing_a_ranks_shards_is_not_completed(sharded_run: Path, tmp_path: Path) -> None:
    written = tmp_path / "checkpoints" / ".step_000000000960.tmp-shards"
    for folder in (shards.MODEL_DIR, shards.OPTIMIZER_DIR):
        shutil.copytree(newest(sharded_run) / folder, written / folder)
    (written / shards.MODEL_DIR / "shard-00002-model-00001-of-00001.safetensors").unlink()
    state = (newest(sharded_run) / "state.json").read_bytes()
    with pytest.raises(UserError, match=r"in model/, .* has \d+ of its \d+ values .* shared file system"):
        ckpt.save_checkpoint(tmp_path / "checkpoints", 960, {"state.json": state}, 2, written)
    assert not written.exists() and not ckpt.list_checkpoints(tmp_path / "checkpoints")


def test_a_lost_shard_file_makes_resume_fall_back_to_the_previous_checkpoint(
    sharded_run: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(sharded_run, run_dir)
    next(newest(run_dir).glob("optimizer/shard-*")).unlink()
    done = train_ranks(2, *RUN, "--run-dir", str(run_dir), "--resume", "train.sharding=fsdp")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (
        "is missing" in done.stderr and "resuming from" in done.stderr and "step_000000000480" in done.stderr
    )


DQN_RUN = [
    "--config", str(CARTPOLE_DQN), "env.num_envs=3", "model.hidden_sizes=[32,32]", "algo.rollout_steps=8",
    "algo.gradient_steps=4", "algo.batch_size=15", "algo.learning_starts=48", "algo.target_update_interval=3",
    "algo.tau=0.5", "train.total_steps=192", "train.stop_return=null", "log.tensorboard=false",
    "log.progress=false", "checkpoint.interval_steps=96",
]  # fmt: skip
"""6 updates of 4 gradient steps on batches of 8 and 7 samples, the target moved every 3 steps."""


SAC_RUN = [
    "--config", str(PENDULUM_SAC), "env.num_envs=3", "model.hidden_sizes=[32,32]", "algo.rollout_steps=8",
    "algo.gradient_steps=3", "algo.batch_size=15", "algo.learning_starts=48", "train.total_steps=144",
    "train.stop_return=null", "log.tensorboard=false", "log.progress=false", "checkpoint.interval_steps=72",
]  # fmt: skip
"""4 updates of 3 gradient steps (temperature, critics, actor, Polyak targets) on 8 and 7 samples."""

TD3_RUN = [str(PENDULUM_TD3) if arg == str(PENDULUM_SAC) else arg for arg in SAC_RUN]
"""4 updates of 3 gradient steps (critics; actor and Polyak targets every 2nd) on 8 and 7 samples."""

APPO_RUN = [
    *(str(REPO / "configs" / "cartpole_appo.yaml") if arg == str(CARTPOLE) else arg for arg in RUN),
    "collect.processes=0", "collect.lag=0", "algo.target_update_every=3", "checkpoint.interval_steps=960",
]  # fmt: skip
"""``RUN``'s 10 updates with APPO's V-trace, the target network copied after every 3rd."""


@pytest.mark.parametrize(
    ("run", "online", "target"),
    [
        (DQN_RUN, "q_network", "target_network"),
        (SAC_RUN, "critic", "critic_target"),
        (TD3_RUN, "actor", "actor_target"),
        (APPO_RUN, "policy", "target_policy"),
    ],
    ids=["dqn", "sac", "td3", "appo"],
)
def test_sharded_learners_take_the_replicated_steps_with_sharded_targets(
    tmp_path: Path, run: list[str], online: str, target: str
) -> None:
    assert_sharded_takes_the_replicated_steps(tmp_path, run, online, target)


def assert_sharded_takes_the_replicated_steps(
    tmp_path: Path, run: list[str], online: str, target: str
) -> None:
    """``run`` on 2 ranks sharded and replicated: the same weights and Adam state to 1e-6, saved as
    shards, and the ``target`` network has lagged its ``online`` one."""
    runs = {sharding: tmp_path / sharding for sharding in ("none", "fsdp")}
    for sharding, run_dir in runs.items():
        done = train_ranks(2, *run, "--run-dir", str(run_dir), f"train.sharding={sharding}")
        assert done.returncode == 0, done.stderr[-3000:]
    sharded, replicated = newest(runs["fsdp"]), newest(runs["none"])
    assert (sharded / shards.MODEL_DIR).is_dir()
    whole = model_tensors(sharded)
    assert_same(model_tensors(replicated), whole, atol=1e-6)
    assert_same(optimizer_tensors(replicated), optimizer_tensors(sharded), atol=1e-6)
    trained, lagging = ({k.split(".", 1)[1]: v for k, v in whole.items() if k.startswith(f"{net}.")}
                        for net in (online, target))  # fmt: skip
    assert lagging and max(float((trained[k] - lagging[k]).abs().max()) for k in trained) > 1e-4


def test_bf16_sharded_grpo_trains_with_float32_shards_and_held_gradients(tmp_path: Path) -> None:
    """bfloat16 through FSDP's mixed-precision policy, gradients held whole over 2 micro-batches:
    the run trains (finite losses, weights that move) and saves float32 shards."""
    run_dir = tmp_path / "run"
    done = train_ranks(
        2, "--config", str(GRPO_REVERSE), "--run-dir", str(run_dir), "train.sharding=fsdp",
        "train.mixed_precision=bf16", "train.gradient_accumulation_steps=2",
        "train.hold_unsharded_gradients=true",
        "algo.num_prompts_per_step=4", "algo.num_generations_per_prompt=2", "algo.max_new_tokens=4",
        "model.transformer={layers: 2, width: 16, heads: 2, context: 16}", "task.max_length=4",
        "train.total_steps=24", "train.stop_return=null", "eval.every=1000", "log.tensorboard=false",
        "log.progress=false", "checkpoint.interval_steps=8", "checkpoint.keep_last=5",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 3 and all(np.isfinite(row["loss"]) and row["grad_norm"] > 0 for row in rows)
    first, last = (model_tensors(c) for c in ckpt.list_checkpoints(run_dir / "checkpoints")[::2])
    assert {t.dtype for t in last.values()} == {torch.float32}
    assert max(float((last[k] - first[k]).abs().max()) for k in last) > 1e-4


@pytest.mark.parametrize(
    ("overrides", "said"),
    [
        (["train.sharding=hsdp"], "train.sharding=hsdp replicates across nodes and shards within each"),
        (["train.sharding=fsdp", "collect.processes=1"], "does not work with collect.processes=1"),
        (["train.sharding=fsdp", "ml_framework=jax"], "does not work with ml_framework: jax"),
    ],
    ids=["hsdp-on-one-node", "collector-processes", "jax"],
)
def test_what_sharding_cannot_do_is_one_line(tmp_path: Path, overrides: list[str], said: str) -> None:
    done = train_ranks(2, *RUN, "--run-dir", str(tmp_path / "run"), *overrides)
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if said in line]
    assert lines and "Traceback" not in done.stderr
    assert not (tmp_path / "run").exists()  # refused before the run dir was made


def test_sharding_is_refused_by_an_algorithm_that_does_not_honour_it(tmp_path: Path) -> None:
    """Every algorithm of distrl's shards; one from outside that does not say it does (the
    guide's REINFORCE) is refused."""
    name = "algo.name=myalgos.reinforce:ALGORITHM"
    run = ["--env", "CartPole-v1", name, "train.sharding=fsdp", "--run-dir", str(tmp_path / "run")]
    done = distrl("train", *run, env=plugins(tmp_path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert f"train.sharding=fsdp is not supported by {name}" in done.stderr


def test_held_gradients_without_sharding_are_one_line(tmp_path: Path) -> None:
    done = distrl(
        "train",
        "--config",
        str(GRPO_REVERSE),
        "train.hold_unsharded_gradients=true",
        "--run-dir",
        str(tmp_path),
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "train.hold_unsharded_gradients=true is for sharded learners" in done.stderr
