"""NeMo RL's ``grpo:`` section, as its documents write it, lands on distrl's own keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from distrl.config.grpo_vocabulary import KEYS
from distrl.config.run import load_config
from distrl.errors import UserError

LARGE_SCALE = """
grpo:
  num_nodes: 16
  gpus_per_node: 8
  policy_workers_per_node: 4
  env_workers_per_node: 32
  data_workers_per_node: 8
  batch_size: 256
  learning_rate: 2e-5
  max_episode_length: 200
  gradient_accumulation_steps: 4
  mixed_precision: true
  gradient_checkpointing: true
  ray_address: "head_node_ip:6379"
  namespace: "nemo_rl_training"
  backend: "nccl"
  timeout: 300
  num_generations_per_prompt: 16
  use_leave_one_out_baseline: false
  normalize_rewards: true
  ratio_clip_min: 0.2
  ratio_clip_max: 0.28
  reference_policy_kl_penalty: 0.01
  token_level_loss: false
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return path


def test_the_seed_documents_keys_land_on_distrls_sections(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, LARGE_SCALE))
    assert cfg.algo.name == "grpo"
    assert (cfg.cluster.num_nodes, cfg.cluster.gpus_per_node) == (16, 8)
    assert (cfg.workers.policy, cfg.workers.verifier, cfg.workers.prompt) == (64, 512, 128)
    assert (cfg.algo.num_prompts_per_step, cfg.algo.learning_rate, cfg.algo.max_new_tokens) == (
        256,
        2e-5,
        200,
    )
    assert (cfg.train.gradient_accumulation_steps, cfg.train.mixed_precision) == (4, "bf16")
    assert cfg.train.activation_checkpointing and cfg.train.device == "cuda" and cfg.comm.timeout_s == 300
    assert (cfg.cluster.ray_address, cfg.cluster.namespace) == ("head_node_ip:6379", "nemo_rl_training")
    assert (cfg.algo.num_generations_per_prompt, cfg.algo.baseline, cfg.algo.scale_by_std) == (
        16,
        "mean",
        True,
    )
    assert (cfg.algo.ratio_clip_min, cfg.algo.ratio_clip_max, cfg.algo.kl_coef) == (0.2, 0.28, 0.01)
    assert cfg.algo.loss_normalization == "sequence"
    assert all(meaning for _, _, meaning in KEYS.values())  # every key says what it means


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("grpo:\n  batch_size: 8\nalgo:\n  name: grpo\n  num_prompts_per_step: 4\n",
         r"grpo.batch_size sets algo.num_prompts_per_step, which is set already; give it once"),
        ("grpo:\n  batch_size: 8\n  num_prompts_per_step: 4\n",
         r"grpo.num_prompts_per_step sets algo.num_prompts_per_step"),
        ("grpo:\n  max_memory_MB: 40000\n",
         r"grpo.max_memory_MB is not a key distrl reads there \(known: num_nodes, "),
        ("grpo:\n  backend: mpi\n", r"grpo.backend='mpi': expected nccl or gloo"),
    ],
    ids=["both-places", "two-grpo-keys", "unknown", "backend"],
)  # fmt: skip
def test_a_key_given_twice_or_unknown_is_one_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        load_config(write(tmp_path, text))


def test_asynchronous_grpo_keys_land_on_generation_workers_and_the_lag(tmp_path: Path) -> None:
    async_grpo = "grpo:\n  generation_workers: 2\n  max_trajectory_age_steps: 1\n"
    cfg = load_config(write(tmp_path, async_grpo + "  use_importance_sampling_correction: false\n"))
    assert (cfg.workers.generation, cfg.collect.lag, cfg.algo.importance_sampling_correction) == (2, 1, False)
    # Running ahead needs workers to run ahead in: one line.
    with pytest.raises(UserError, match=r"collect.lag=1 needs collect.processes of 1 or more, or Ray mode's"):
        load_config(write(tmp_path, "grpo:\n  max_trajectory_age_steps: 1\n"))


def test_nemo_rls_memory_keys_land_on_sharding_and_packing(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, "grpo:\n  dtensor: true\n  train_mb_tokens: 256\n"))
    assert (cfg.train.sharding, cfg.algo.sequence_packing_tokens) == ("fsdp", 256)
