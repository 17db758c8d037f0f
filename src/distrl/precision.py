"""Mixed precision: one switch for every algorithm (``train.mixed_precision``).

Where it is on, the heavy part of a model (a CNN encoder today; the sequence model the GRPO
issue adds) runs its forward passes under ``torch.autocast`` in bfloat16 while the weights, the
optimiser state and everything after the encoder stay float32 (the heads, the distributions, the
loss). ``auto`` turns it on only where it wins: for image encoders on a device that computes
bfloat16 natively (a CPU with AVX512-BF16 or AMX, a CUDA GPU with bf16), and leaves feature-vector
MLPs in float32, where it would only cost.
"""

from __future__ import annotations

import contextlib

import torch


def native_bf16(device: torch.device) -> bool:
    """The device computes bfloat16 in hardware (not emulated through float32)."""
    if device.type == "cuda":  # Ampere (sm_80) and later; earlier GPUs emulate it
        return torch.cuda.get_device_capability(device) >= (8, 0)
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def resolved(setting: str, device: torch.device) -> str:
    """``setting`` with ``auto`` decided for a learner on ``device``: what its env workers are
    told, so that they act in the precision the learner updates in, whatever their own CPUs do."""
    if setting != "auto":
        return setting
    return "bf16" if native_bf16(device) else "fp32"


def low_precision(setting: str, device: torch.device, heavy_model: bool) -> torch.dtype | None:
    """The autocast dtype ``train.mixed_precision`` gives a model on ``device`` (None: float32).
    ``heavy_model``: it has a part worth it (an image encoder)."""
    setting = resolved(setting, device)
    return torch.bfloat16 if setting == "bf16" and heavy_model else None


def autocast(device: torch.device, dtype: torch.dtype | None) -> contextlib.AbstractContextManager:
    """``torch.autocast`` to ``dtype`` on ``device``'s type; nothing when ``dtype`` is None."""
    return contextlib.nullcontext() if dtype is None else torch.autocast(device.type, dtype=dtype)
