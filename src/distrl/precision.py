"""Mixed precision: one switch for every algorithm (``train.mixed_precision``).

Where it is on, the heavy part of a model (a CNN encoder today; the sequence model the GRPO
issue adds) runs its forward passes under ``torch.autocast`` in bfloat16 while the weights, the
optimiser state and everything after the encoder stay float32 (the heads, the distributions, the
loss). ``auto`` turns it on only where it wins: for image encoders on a device that computes
bfloat16 natively (a CPU with AVX512-BF16 or AMX, a CUDA GPU with bf16), and leaves feature-vector
MLPs in float32, where it would only cost.
"""

from __future__ import annotations

import torch


def native_bf16(device: torch.device) -> bool:
    """The device computes bfloat16 in hardware (not emulated through float32)."""
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()


def low_precision(setting: str, device: torch.device, heavy_model: bool) -> torch.dtype | None:
    """The autocast dtype ``train.mixed_precision`` gives a model on ``device`` (None: float32).
    ``heavy_model``: it has a part worth it (an image encoder)."""
    if setting == "bf16":
        return torch.bfloat16
    if setting == "auto" and heavy_model and native_bf16(device):
        return torch.bfloat16
    return None
