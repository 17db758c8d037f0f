"""NeMo RL's ``grpo:`` section, read as its documents write it and translated onto distrl's own
sections before validation. Each key has one meaning here (``KEYS``); a key given both there and
in distrl's own section is one line of error, as is a key distrl does not have."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from distrl.errors import UserError


def _same(value: Any) -> Any:
    return value


def _choice(if_true: str, if_false: str) -> Callable[[Any], Any]:
    return lambda value: if_true if value is True else if_false if value is False else value


def _backend_device(value: Any) -> Any:
    """The collective backend follows the learners' device in distrl (NCCL on GPUs, gloo or
    distrl's socket sums on CPUs), so naming one names the device."""
    devices = {"nccl": "cuda", "gloo": "cpu"}
    if value not in devices:
        raise UserError(f"grpo.backend={value!r}: expected nccl or gloo", code="grpo-backend-unknown")
    return devices[value]


KEYS: dict[str, tuple[str, Callable[[Any], Any], str]] = {
    # grpo key: (distrl key, the value's conversion, what it means)
    # The seed document's keys.
    "num_nodes": ("cluster.num_nodes", _same, "nodes the job needs"),
    "gpus_per_node": ("cluster.gpus_per_node", _same, "GPUs each node gives the job"),
    "policy_workers": ("workers.policy", _same, "learners (they generate and train)"),
    "policy_workers_per_node": ("workers.policy_per_node", _same, "learners per node"),
    "env_workers": ("workers.verifier", _same, "workers that score completions"),
    "env_workers_per_node": ("workers.verifier_per_node", _same, "scoring workers per node"),
    "data_workers": ("workers.prompt", _same, "workers that serve prompts"),
    "data_workers_per_node": ("workers.prompt_per_node", _same, "prompt workers per node"),
    "batch_size": (
        "algo.num_prompts_per_step",
        _same,
        "prompts per step over all learners (not completions)",
    ),
    "learning_rate": ("algo.learning_rate", _same, "the optimiser's learning rate"),
    "max_episode_length": ("algo.max_new_tokens", _same, "the longest completion, in tokens"),
    "gradient_accumulation_steps": ("train.gradient_accumulation_steps", _same, "micro-batches per step"),
    "mixed_precision": ("train.mixed_precision", _choice("bf16", "fp32"), "true: bf16 autocast"),
    "gradient_checkpointing": ("train.activation_checkpointing", _same, "recompute activations"),
    "backend": ("train.device", _backend_device, "nccl: learners on GPUs; gloo: on CPUs"),
    "timeout": ("comm.timeout_s", _same, "seconds a collective may wait"),
    "ray_address": ("cluster.ray_address", _same, "the Ray cluster to join"),
    "namespace": ("cluster.namespace", _same, "the Ray namespace of the job's actors"),
    # NeMo RL's own GRPO keys.
    "num_prompts_per_step": ("algo.num_prompts_per_step", _same, "prompts per step over all learners"),
    "num_generations_per_prompt": ("algo.num_generations_per_prompt", _same, "G, completions per prompt"),
    "use_leave_one_out_baseline": ("algo.baseline", _choice("leave_one_out", "mean"), "true: leave-one-out"),
    "normalize_rewards": ("algo.scale_by_std", _same, "divide advantages by the group's std"),
    "ratio_clip_min": ("algo.ratio_clip_min", _same, "ratio clipped below at 1 - this"),
    "ratio_clip_max": ("algo.ratio_clip_max", _same, "ratio clipped above at 1 + this"),
    "reference_policy_kl_penalty": ("algo.kl_coef", _same, "weight of the KL penalty"),
    "token_level_loss": ("algo.loss_normalization", _choice("token", "sequence"), "true: per-token mean"),
    # Asynchronous GRPO (NeMo RL's async_grpo and loss_fn keys, flat here).
    "generation_workers": ("workers.generation", _same, "workers that generate completions (Ray mode)"),
    "max_trajectory_age_steps": ("collect.lag", _same, "steps generation runs ahead of training"),
    "use_importance_sampling_correction": (
        "algo.importance_sampling_correction",
        _same,
        "weight the surrogate by pi_old / pi_gen (truncated)",
    ),
    # NeMo RL's policy memory keys (dtensor_cfg.enabled, sequence_packing.train_mb_tokens), flat.
    "dtensor": ("train.sharding", _choice("fsdp", "none"), "true: weights sharded over the learners (FSDP2)"),
    "train_mb_tokens": ("algo.sequence_packing_tokens", _same, "sequence packing: tokens a packed row"),
}


def translate_grpo_section(data: dict[str, Any], source: str) -> dict[str, Any]:
    """``data`` with its ``grpo:`` section moved onto distrl's sections (and ``algo.name: grpo``)."""
    section = data.get("grpo")
    if section is None:
        return data
    if not isinstance(section, dict):
        raise UserError(
            f"{source}: grpo: must be a mapping of keys, got {type(section).__name__} "
            f"(known: {', '.join(KEYS)})",
            code="grpo-section-not-mapping",
        )
    unknown = sorted(set(section) - set(KEYS))
    if unknown:
        raise UserError(
            f"{source}: grpo.{unknown[0]} is not a key distrl reads there (known: {', '.join(KEYS)})",
            code="grpo-key-unknown",
        )
    data = {
        key: dict(value) if isinstance(value, dict) else value for key, value in data.items() if key != "grpo"
    }
    for key, value in section.items():
        target, convert, _ = KEYS[key]
        top, _, name = target.partition(".")
        part = data.setdefault(top, {})
        if not isinstance(part, dict):
            raise UserError(f"{source}: {top}: must be a mapping of keys", code="grpo-target-not-mapping")
        if name in part:
            raise UserError(
                f"{source}: grpo.{key} sets {target}, which is set already; give it once",
                code="grpo-key-set-twice",
            )
        part[name] = convert(value)
    data.setdefault("algo", {}).setdefault("name", "grpo")
    return data
