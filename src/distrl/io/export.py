"""A checkpoint's deterministic policy as one self-contained file for deployment: raw observations
in, env actions out, observation normalisation and action bounds inside.

TorchScript (``torch.jit.trace``) runs with libtorch alone; ONNX runs with onnxruntime and needs
the ``export`` extra. Both take a float32 batch ``[batch, obs_dim]`` of any batch size.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
from torch import nn

from distrl.errors import UserError


def export_policy(policy: nn.Module, obs_dim: int, fmt: str, out: Path) -> None:
    """Write ``policy`` as ``fmt`` (``torchscript`` or ``onnx``) to ``out``."""
    policy = policy.eval().requires_grad_(False)  # a deployed policy's outputs need no graph
    example = torch.zeros(2, obs_dim)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        if fmt == "torchscript":
            torch.jit.save(torch.jit.trace(policy, example), str(out))
        else:
            _export_onnx(policy, example, out)
    except OSError as exc:
        raise UserError(f"--out {out}: cannot write: {exc.strerror or exc}") from None


def _export_onnx(policy: nn.Module, example: torch.Tensor, out: Path) -> None:
    missing = [m for m in ("onnx", "onnxscript") if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(
            f"--format onnx needs {' and '.join(missing)}: install the export extra "
            "(pip install 'distrl[export]')"
        )
    batch = torch.export.Dim("batch", min=1)
    program = torch.onnx.export(
        policy,
        (example,),
        input_names=["obs"],
        output_names=["action"],
        dynamic_shapes={"obs": {0: batch}},
        dynamo=True,
        external_data=False,
    )
    program.save(str(out))
