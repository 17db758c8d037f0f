"""A checkpoint's deterministic policy as one self-contained file for deployment: raw observations
in, env actions out, observation normalisation and action bounds inside.

TorchScript (``torch.jit.trace``) runs with libtorch alone; ONNX runs with onnxruntime and needs
the ``export`` extra. Both take a batch ``[batch, *obs_shape]`` of any batch size, float32 (uint8
for integer images, as the env gives them).
"""

from __future__ import annotations

import copy
import importlib.util
import os
from pathlib import Path

import gymnasium as gym
import torch
from torch import nn

from distrl.envs.base import obs_tensor_dtype
from distrl.errors import UserError


def format_of(path: Path) -> str:
    """The format a file name asks for: ONNX for ``.onnx``, TorchScript otherwise."""
    return "onnx" if path.suffix == ".onnx" else "torchscript"


def check_can_export(fmt: str, out: Path, where: str) -> None:
    """Fail with one line, before any work, if ``fmt`` cannot be written to ``out``."""
    missing = [m for m in ("onnx", "onnxscript") if importlib.util.find_spec(m) is None]
    if fmt == "onnx" and missing:
        raise UserError(
            f"{where}: ONNX needs {' and '.join(missing)}: install the export extra "
            "(pip install 'distrl[export]')"
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{where} {out}: cannot write: {exc.strerror or exc}") from None
    if out.is_dir() or not os.access(out.parent, os.W_OK):
        raise UserError(f"{where} {out}: cannot write there")


def export_policy(
    policy: nn.Module, observation_space: gym.spaces.Box, fmt: str, out: Path, where: str = "--out"
) -> None:
    """Write ``policy`` as ``fmt`` (``torchscript`` or ``onnx``) to ``out``, replacing it only once
    the new file is whole. ``policy`` itself is left as it was (a copy is exported, on the CPU)."""
    check_can_export(fmt, out, where)
    # A deployed policy's outputs need no graph.
    policy = copy.deepcopy(policy).cpu().eval().requires_grad_(False)
    for module in policy.modules():  # a file for any CPU: float32 throughout
        if hasattr(module, "low_precision"):
            module.low_precision = None
    # A policy with more inputs than observations (parametric DQN's candidates) names them.
    examples = (
        policy.example_inputs(observation_space.shape[0])
        if hasattr(policy, "example_inputs")
        else (torch.zeros(2, *observation_space.shape, dtype=obs_tensor_dtype(observation_space)),)
    )
    partial = out.with_name(out.name + ".partial")
    try:
        if fmt == "torchscript":
            torch.jit.save(torch.jit.trace(policy, examples), str(partial))
        else:
            _export_onnx(policy, examples, getattr(policy, "input_names", ("obs",)), partial)
        os.replace(partial, out)
    except OSError as exc:
        raise UserError(f"{where} {out}: cannot write: {exc.strerror or exc}") from None


def _export_onnx(
    policy: nn.Module, examples: tuple[torch.Tensor, ...], names: tuple[str, ...], out: Path
) -> None:
    """Any batch size; for inputs with a second axis beyond the observation's features (candidate
    sets), any size of that axis too."""
    batch, candidates = torch.export.Dim("batch", min=1), torch.export.Dim("candidates", min=1)
    dynamic = {name: {0: batch} if i == 0 else {0: batch, 1: candidates} for i, name in enumerate(names)}
    program = torch.onnx.export(
        policy,
        examples,
        input_names=list(names),
        output_names=["action"],
        dynamic_shapes=dynamic,
        dynamo=True,
        external_data=False,
    )
    program.save(str(out))
