"""GRPO's runner in the shared loop: 2 ranks end where 1 rank does, a resumed run where an
unbroken one does, and the command line trains, evaluates and refuses bad input in one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from distrl.comm.torch_comm import TorchComm
from distrl.config.run import load_config
from distrl.entry import build_training
from distrl.io import checkpoint as ckpt
from distrl.io.shards import full_tensor
from tests.distributed import run_ranks
from tests.helpers import DEVICES, GRPO_REVERSE, distrl, train_ranks

SMALL = [
    "algo.num_prompts_per_step=5",  # 3 and 2 prompts on 2 ranks: uneven shares
    "algo.num_generations_per_prompt=3",
    "algo.max_new_tokens=6",
    "algo.update_epochs=2",
    "algo.num_minibatches=2",
    "algo.kl_coef=0.1",
    "algo.entropy_coef=0.01",
    "algo.entropy_target=4.0",  # above the policy's entropy: the weight follows every rank's batches
    "task.rewards=[{function: 'tests.tasks.reward_functions:length'}, "
    "{function: positional_match, weight: 2}]",
    "model.transformer={layers: 1, width: 16, heads: 2, context: 16}",
    "task.max_length=4",
    "train.total_steps=45",  # three updates of 15 completions
    "train.stop_return=null",
    "eval.episodes=4",
    "eval.every=2",
    "log.tensorboard=false",
    "log.progress=false",
]


def _train(comm: TorchComm, overrides: list[str], run_dir: Path, out: Path) -> None:
    torch.set_default_dtype(torch.float64)
    cfg = load_config(GRPO_REVERSE, overrides)
    loop = build_training(cfg, comm, torch.device("cpu"), run_dir / f"world{comm.world_size}")
    policy = loop.runner.policy
    start = torch.cat([full_tensor(p.detach()).reshape(-1) for p in policy.parameters()])
    loop.run()
    end = torch.cat([full_tensor(p.detach()).reshape(-1) for p in policy.parameters()])  # every rank
    if comm.is_main:
        np.save(out, torch.stack([start, end]).numpy())


DYNAMIC_SAMPLING = [
    "algo.dynamic_sampling=true",
    "algo.num_prompts_per_step=3",
    "algo.dynamic_sampling_factor=3",  # 9 prompts drawn: 5 and 4 on 2 ranks
    "train.total_steps=54",  # two updates of 27 completions
]


@pytest.mark.parametrize(
    "extra",
    [
        ["algo.loss_normalization=token"],
        ["algo.loss_normalization=sequence"],
        DYNAMIC_SAMPLING,
        # Each rank holds a shard of the policy and of its reference; with dynamic sampling a
        # rank may train on no prompt of a minibatch (it runs its passes on an empty batch).
        ["algo.loss_normalization=token", "algo.kl_coef=0.05", "train.sharding=fsdp"],
        [*DYNAMIC_SAMPLING, "train.sharding=fsdp"],
        # Generation on the shards, a layer gathered at a time: the ranks decode in lockstep;
        # each block's activations recomputed in the backward pass, its weights gathered again.
        [
            "algo.loss_normalization=token",
            "train.sharding=fsdp",
            "algo.generation_weights=sharded",
            "train.activation_checkpointing=true",
        ],
        # Sequences packed into rows of 12 tokens, 2 micro-batches whose gradients are held
        # whole until the second.
        [
            "algo.loss_normalization=sequence",
            "train.sharding=fsdp",
            "algo.sequence_packing_tokens=12",
            "train.gradient_accumulation_steps=2",
            "train.hold_unsharded_gradients=true",
        ],
    ],
    ids=[
        "token",
        "sequence",
        "dynamic_sampling",
        "sharded-kl",
        "sharded-dynamic_sampling",
        "sharded-generation",
        "sharded-packed-held",
    ],
)
@pytest.mark.slow
def test_two_ranks_end_with_the_parameters_of_one(tmp_path: Path, extra: list[str]) -> None:
    overrides = [*SMALL, *extra]
    run_ranks(_train, 1, overrides, tmp_path, tmp_path / "one.npy")
    run_ranks(_train, 2, overrides, tmp_path, tmp_path / "two.npy")
    (start, one), (_, two) = np.load(tmp_path / "one.npy"), np.load(tmp_path / "two.npy")
    assert one.dtype == np.float64 and np.abs(one - two).max() < 1e-6
    assert np.abs(one - start).max() > 1e-3  # the updates moved the weights: the test can fail
    rows = [json.loads(line) for line in (tmp_path / "world1" / "metrics.jsonl").read_text().splitlines()]
    rows2 = [json.loads(line) for line in (tmp_path / "world2" / "metrics.jsonl").read_text().splitlines()]
    assert [r["episode_return_mean"] for r in rows] == pytest.approx(
        [r["episode_return_mean"] for r in rows2]
    )
    dynamic = "algo.dynamic_sampling=true" in extra
    assert rows[-1]["global_step"] == (54 if dynamic else 45)
    assert all(r["trained_prompts"] <= (3 if dynamic else 5) for r in rows)
    assert rows[0]["approx_kl"] > 0.0  # a second epoch ran against the generating policy
    assert [r["entropy_coef"] for r in rows] == pytest.approx([r["entropy_coef"] for r in rows2])
    # The loop scores held-out prompts every eval.every updates, split over the ranks.
    for one_rank, two_ranks in zip(rows, rows2, strict=True):
        heldout = {k: v for k, v in one_rank.items() if k.startswith("heldout/")}
        assert heldout.keys() == (
            {"heldout/reward", "heldout/exact_match"} if one_rank["update"] % 2 == 0 else set()
        )
        assert heldout == pytest.approx({k: two_ranks[k] for k in heldout})
    assert all(0.01 < r["entropy_coef"] < 0.1 for r in rows)  # raised by the floor, not capped


def test_dynamic_sampling_trains_on_the_first_groups_whose_rewards_differ(tmp_path: Path) -> None:
    cfg = load_config(GRPO_REVERSE, [*SMALL, *DYNAMIC_SAMPLING])
    runner = build_training(cfg, TorchComm(), torch.device("cpu"), tmp_path).runner
    advantages = torch.zeros(9, 3, dtype=torch.float64)
    advantages[[1, 4, 6, 8]] = torch.tensor([0.5, -0.25, -0.25], dtype=torch.float64)
    kept = runner.kept_prompts(advantages)
    assert kept.tolist() == [1, 4, 6]  # the first num_prompts_per_step informative groups
    assert runner.local_rows(kept).tolist() == [3, 4, 5, 12, 13, 14, 18, 19, 20]
    plan = runner.minibatch_plan(0, kept)
    assert len(plan) == 2 and [len(part) for part in plan[0]] == [6, 3]  # whole groups: 2 + 1
    assert sorted(torch.cat(plan[0]).tolist()) == list(range(9))  # rows of the kept batch
    assert runner.minibatch_plan(0, kept[:0]) == []  # nothing informative: no optimiser step


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
@pytest.mark.parametrize("checkpointing", [False, True], ids=["plain", "checkpointed"])
@pytest.mark.parametrize("device", DEVICES)
def test_the_first_step_starts_from_the_generating_policy(
    tmp_path: Path, precision: str, checkpointing: bool, device: str
) -> None:
    """The ratios' reference is the policy that sampled (kept by generation in full precision,
    taken again in low precision): at the sampling temperature and before top-k, so the one
    optimiser step of a batch starts at ratio 1. Plain, the CPU loss pass feeds each prompt once
    for its completions; checkpointed, it feeds whole sequences, and on CUDA the recomputation
    must take the forward pass's attention backend or torch's checkpoint stops the step."""
    overrides = [*SMALL, "algo.update_epochs=1", "algo.num_minibatches=1", "algo.temperature=0.7"]
    memory = [f"train.mixed_precision={precision}", f"train.activation_checkpointing={checkpointing}"]
    cfg = load_config(GRPO_REVERSE, [*overrides, "algo.top_k=3", *memory])
    result = build_training(cfg, TorchComm(), torch.device(device), tmp_path).runner.iteration(0)
    assert result.averaged["clip_fraction"] == 0.0 and result.averaged["approx_kl"] < 1e-10
    assert not torch.backends.cuda.cudnn_sdp_enabled()


def _run_and_resume_halfway(comm: TorchComm, overrides: list[str], run_dir: Path) -> None:
    torch.set_default_dtype(torch.float64)
    cfg = load_config(GRPO_REVERSE, overrides)
    build_training(cfg, comm, torch.device("cpu"), run_dir / "unbroken").run()
    halfway = ckpt.load_checkpoint(run_dir / "unbroken" / "checkpoints" / ckpt.checkpoint_dir_name(30))
    build_training(cfg, comm, torch.device("cpu"), run_dir / "resumed", halfway).run()


@pytest.mark.slow
def test_a_resumed_run_ends_where_an_unbroken_one_does(tmp_path: Path) -> None:
    overrides = [
        *SMALL,
        "train.total_steps=60",
        "checkpoint.interval_steps=30",
        "task.curriculum_fraction=0.5",
    ]
    run_ranks(_run_and_resume_halfway, 1, overrides, tmp_path)
    unbroken, resumed = (
        ckpt.tensors_from_bytes(
            ckpt.load_checkpoint(ckpt.resolve_checkpoint(tmp_path / run))["model.safetensors"]
        )
        for run in ("unbroken", "resumed")
    )
    assert unbroken.keys() == resumed.keys() and "reference.token_embedding.weight" in unbroken
    for key in unbroken:
        torch.testing.assert_close(resumed[key], unbroken[key], atol=1e-6, rtol=0)
    rows = [json.loads(line) for line in (tmp_path / "resumed" / "metrics.jsonl").read_text().splitlines()]
    assert [row["global_step"] for row in rows] == [45, 60]
    whole = [json.loads(line) for line in (tmp_path / "unbroken" / "metrics.jsonl").read_text().splitlines()]
    # Counters go on from the checkpoint's: finished episodes (completions) over the whole run.
    assert [row["episodes"] for row in rows] == [row["episodes"] for row in whole[-2:]] == [45, 60]


@pytest.mark.slow
def test_the_command_line_trains_and_evaluates_a_sequence_policy(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = distrl(
        "train", "--config", str(GRPO_REVERSE), "--run-dir", str(run_dir), *SMALL[:-2],
        "train.total_steps=30", "train.stop_return=0.99", "train.stop_check_every=1",
        "train.activation_checkpointing=true",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {"heldout/exact_match", "stop_check_return", "time/generate", "reward/length"} <= rows[-1].keys()
    evaluated = distrl("eval", "--checkpoint", str(run_dir), "--episodes", "6", "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    report = json.loads(evaluated.stdout)
    assert report["episodes"] == len(report["returns"]) == 6
    assert set(report["returns"]) <= {0.0, 1.0}  # exact match, whatever the training reward
    said = distrl("eval", "--checkpoint", str(run_dir), "--episodes", "6").stdout
    assert said.startswith("task reverse: held-out exact match "), said
    assert "(newest checkpoint " in said, said
    # The best checkpoint is the first with the highest held-out exact match (not the stop check's).
    heldout = [
        (row["heldout/exact_match"], row["global_step"]) for row in rows if "heldout/exact_match" in row
    ]
    top = max(score for score, _ in heldout)
    record = ckpt.best_checkpoint(run_dir / "checkpoints")
    assert record is not None and record["metric"] == "heldout/exact_match"
    assert (record["value"], record["global_step"]) == next((s, g) for s, g in heldout if s == top)
    best = distrl("eval", "--checkpoint", str(run_dir), "--episodes", "6", "--best", "--json")
    assert best.returncode == 0, best.stderr
    assert (json.loads(best.stdout)["chosen"], json.loads(best.stdout)["global_step"]) == (
        "best",
        record["global_step"],
    )


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["task.max_length=12"],
            r"^distrl: error: task prompt 'rev \d{12}=' \(17 tokens\) and algo.max_new_tokens=8 need 25",
        ),
        (
            ["algo.num_generations_per_prompt=1"],
            r"algo.num_generations_per_prompt: .*greater than or equal to 2",
        ),
        (
            ["task.rewards=[{function: 'tests.tasks.reward_functions:fails'}]"],
            r"task.rewards: tests.tasks.reward_functions:fails raised ValueError: cannot score this at "
            r".*tests/tasks/reward_functions.py:\d+ \(prompt 'rev ",
        ),
        (
            [
                "task.rewards=[{function: 'tests.tasks.reward_functions:never_returns'}]",
                "task.reward_timeout_s=1",
            ],
            r"task.rewards: tests.tasks.reward_functions:never_returns did not return within "
            r"task.reward_timeout_s=1 s and was cut off "
            r"\(prompt 'rev \d+=', completion ",
        ),
        (
            ["task.rewards=[{function: 'tests.tasks.reward_functions:says_yes'}]"],
            r"tests.tasks.reward_functions:says_yes returned 'yes' for prompt 'rev .*; it must return a "
            r"finite number",
        ),
        (
            ["task.rewards=[{function: closest}]"],
            r"function 'closest': expected exact_match or positional_match, or module:function",
        ),
        (["train.compile=true"], r"train.compile=true is not supported by algo.name=grpo"),
        (["output.path=/dev/null"], r"output.path /dev/null: the transformers format is a directory"),
        (
            ["workers.env=2", "workers.verifier=2"],
            r"workers.env and workers.verifier both size the verifier workers of algo.name=grpo: give "
            r"workers.verifier only",
        ),
    ],
    ids=[
        "context",
        "group-of-one",
        "raises",
        "never-returns",
        "not-a-number",
        "unknown-function",
        "compile",
        "output-path",
        "verifiers-twice",
    ],
)
@pytest.mark.slow
def test_bad_input_is_one_line(tmp_path: Path, overrides: list[str], message: str) -> None:
    result = distrl(
        "train",
        "--config",
        str(GRPO_REVERSE),
        "--run-dir",
        str(tmp_path / "run"),
        *overrides,
        "train.total_steps=64",
    )
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert re.search(message, result.stderr), result.stderr


@pytest.mark.slow
def test_two_ranks_train_a_sequence_policy(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    result = train_ranks(2, "--config", str(GRPO_REVERSE), "--run-dir", str(run_dir), *SMALL)
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["ranks"] == 2
    # 5 prompts x 3 completions an update, shared by the ranks (3 and 2 prompts): 3 updates.
    assert [row["global_step"] for row in rows] == [row["episodes"] for row in rows] == [15, 30, 45]
    state = json.loads((ckpt.resolve_checkpoint(run_dir) / "state.json").read_text())
    assert state["ranks"][0]["param_sha256"] == state["ranks"][1]["param_sha256"]  # gradients shared
