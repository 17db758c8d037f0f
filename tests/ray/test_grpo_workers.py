"""GRPO in Ray mode: prompt workers serve the prompts, verifier workers score the completions and
eval workers score held-out prompts, and the learner trains exactly as one process does, a
verifier killed mid-run included (its part scored again: no reward lost or counted twice), its
workers sized by their own keys or, in a config written before those, the env and data workers'."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from distrl.io import checkpoint as ckpt
from tests.helpers import REPO, distrl
from tests.ray_cluster import final_row, metrics_rows, param_digests, ray_train, ray_train_killing

GRPO = REPO / "configs" / "grpo_reverse.yaml"
GRPO_RAY = REPO / "configs" / "grpo_small_cpu.yaml"
"""The same task and model, with 2 verifier, 1 prompt and 1 eval worker."""
SHAPE = ["num_prompts_per_step=4", "num_generations_per_prompt=4", "max_new_tokens=6"]
BUDGET = [
    "model.transformer={layers: 1, width: 16, heads: 2, context: 16}",
    "task.max_length=4",
    "task.rewards=[{function: positional_match}, {function: 'tests.tasks.reward_functions:length'}]",
    "train.total_steps=480",  # 30 updates of 16 completions
    "train.stop_return=null",
    "checkpoint.interval_steps=480",
    "eval.episodes=8",
    "eval.every=3",
]


RAY_BUDGET = [*BUDGET, "grpo.batch_size=4", "grpo.num_generations_per_prompt=4", "grpo.max_episode_length=6"]
"""The shipped Ray config sets these three in its grpo: section: overridden there."""


def local_run(run_dir: Path, *overrides: str) -> None:
    result = distrl(
        "train", "--config", str(GRPO), "--run-dir", str(run_dir), "log.progress=false",
        "log.tensorboard=false", *BUDGET, *(f"algo.{key}" for key in SHAPE), *overrides,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.slow
def test_the_shipped_cpu_config_trains_as_one_process_does(ray_head: str, tmp_path: Path) -> None:
    result = ray_train(ray_head, tmp_path / "ray", *RAY_BUDGET, config=GRPO_RAY)
    assert result.returncode == 0, result.stderr[-3000:]
    local_run(tmp_path / "local")
    assert param_digests(tmp_path / "ray") == param_digests(tmp_path / "local")
    ray_row, local_row = final_row(tmp_path / "ray"), final_row(tmp_path / "local")
    assert ray_row["verifier_worker_failures"] == 0 and ray_row["prompt_worker_failures"] == 0
    assert not {"env_worker_failures", "data_worker_failures"} & ray_row.keys()
    assert ray_row["episode_return_mean"] == local_row["episode_return_mean"]
    # The eval workers scored held-out prompts while training went on; the learner did not.
    assert any("eval/return_mean" in row for row in metrics_rows(tmp_path / "ray"))
    assert not any("heldout/exact_match" in row for row in metrics_rows(tmp_path / "ray"))


OLD_KEYS = ["workers.env=2", "workers.cpus_per_env=0.25", "workers.data=1", "workers.cpus_per_data=0.25"]
"""Verifier and prompt workers as a GRPO config sized them before they had keys of their own."""


@pytest.mark.slow
def test_a_killed_verifier_is_restarted_and_its_part_scored_again(ray_head: str, tmp_path: Path) -> None:
    shape = [f"algo.{key}" for key in SHAPE]
    result, killed = ray_train_killing(
        ray_head, tmp_path / "ray", "verifier", 3, *OLD_KEYS, *BUDGET, *shape, config=GRPO
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert killed, "the run ended before the verifier could be killed"
    assert "Traceback" not in result.stderr
    assert re.search(
        r"verifier worker \d failed \(killed by ray.kill\); .* retrying scoring its part", result.stderr
    )
    # The old keys still size the verifier and prompt workers, each group said once.
    warned = [line for line in result.stderr.splitlines() if line.startswith("distrl: warning:")]
    assert warned == [
        f"distrl: warning: {GRPO}: workers.env, workers.cpus_per_env for algo.name=grpo are its verifier "
        "workers: use workers.verifier, workers.cpus_per_verifier",
        f"distrl: warning: {GRPO}: workers.data, workers.cpus_per_data for algo.name=grpo are its prompt "
        "workers: use workers.prompt, workers.cpus_per_prompt",
    ]
    final = final_row(tmp_path / "ray")
    assert final["verifier_worker_failures"] == 1 and final["prompt_worker_failures"] == 0
    assert final["global_step"] == 480
    # Without eval workers the learner scores held-out prompts itself, in the loop.
    assert any("heldout/exact_match" in row for row in metrics_rows(tmp_path / "ray"))
    local_run(tmp_path / "local")
    assert param_digests(tmp_path / "ray") == param_digests(tmp_path / "local")


@pytest.mark.slow
def test_a_killed_learner_resumes_and_ends_bit_identical_to_one_process(
    ray_head: str, tmp_path: Path
) -> None:
    """The learner killed mid-run: the driver rebuilds its group from the newest checkpoint, and
    the run trains each prompt once, in the same updates (its ledger), and ends with the weights
    of one process that was never stopped, to the bit."""
    every_4 = "checkpoint.interval_steps=64"  # a checkpoint every 4 updates of 16 completions
    result, killed = ray_train_killing(
        ray_head, tmp_path / "ray", "policy", 12, *RAY_BUDGET, every_4, config=GRPO_RAY
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert killed, "the run ended before the learner could be killed"
    assert "the learners' group is rebuilt and resumes from the newest checkpoint" in result.stderr
    assert (
        json.loads((ckpt.resolve_checkpoint(tmp_path / "ray") / "state.json").read_text())["launch_index"]
        == 1
    )
    local_run(tmp_path / "local", every_4)
    ledgers = [(tmp_path / run / "ledger.jsonl").read_text() for run in ("ray", "local")]
    assert ledgers[0] == ledgers[1] and len(ledgers[0].splitlines()) == 30
    assert param_digests(tmp_path / "ray") == param_digests(tmp_path / "local")
