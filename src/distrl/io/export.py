"""A checkpoint's deterministic policy as one self-contained file for deployment: raw observations
in, env actions out, observation normalisation and action bounds inside.

TorchScript (``torch.jit.trace``) runs with libtorch alone; ONNX runs with onnxruntime and needs
the ``export`` extra. Both take a batch ``[batch, *obs_shape]`` of any batch size, float32 (uint8
for integer images, as the env gives them). A policy with memory takes its states ``[batch,
state_size]`` as a second input (``state``: zeros when an episode starts) and gives the next
ones as a second output (``next_state``).
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
from distrl.quiet import quiet, verbose


def check_can_export(fmt: str, out: Path, where: str) -> None:
    """Fail with one line, before any work, if ``fmt`` (``torchscript`` or ``onnx``) cannot be
    written to the file ``out`` (the registry's ``export_check`` of these formats)."""
    missing = [m for m in ("onnx", "onnxscript") if importlib.util.find_spec(m) is None]
    if fmt == "onnx" and missing:
        raise UserError(
            f"{where}: ONNX needs {' and '.join(missing)}: install the export extra "
            "(pip install 'distrl[export]')",
            code="export-onnx-extra-missing",
        )
    check_can_write_in(out, where)
    if out.is_dir():
        raise UserError(f"{where} {out}: cannot write there", code="export-out-is-directory")


def check_can_write_in(out: Path, where: str) -> None:
    """Fail with one line if ``out``'s directory cannot be made or written in."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(
            f"{where} {out}: cannot write: {exc.strerror or exc}", code="export-out-unwritable"
        ) from None
    if not os.access(out.parent, os.W_OK):
        raise UserError(f"{where} {out}: cannot write there", code="export-out-unwritable")


def export_policy(
    policy: nn.Module, observation_space: gym.spaces.Box, fmt: str, out: Path, where: str = "--out"
) -> None:
    """Write ``policy`` as ``fmt`` (``torchscript`` or ``onnx``) to ``out``, replacing it only once
    the new file is whole (the registry's writer of these formats). ``policy`` itself is left as
    it was (a copy is exported, on the CPU)."""
    check_can_export(fmt, out, where)
    # A deployed policy's outputs need no graph.
    policy = copy.deepcopy(policy).cpu().eval().requires_grad_(False)
    for module in policy.modules():  # a file for any CPU: float32 throughout
        if hasattr(module, "low_precision"):
            module.low_precision = None
    # A policy with more inputs than observations (parametric DQN's candidates, a memory state)
    # names them and gives examples.
    examples = (
        policy.example_inputs(observation_space)
        if hasattr(policy, "example_inputs")
        else (torch.zeros(2, *observation_space.shape, dtype=obs_tensor_dtype(observation_space)),)
    )
    partial = out.with_name(out.name + ".partial")
    try:
        if fmt == "torchscript":
            torch.jit.save(torch.jit.trace(policy, examples), str(partial))
        else:
            _export_onnx(policy, examples, partial)
        os.replace(partial, out)
    except OSError as exc:
        raise UserError(
            f"{where} {out}: cannot write: {exc.strerror or exc}", code="export-out-unwritable"
        ) from None


def _export_onnx(policy: nn.Module, examples: tuple[torch.Tensor, ...], out: Path) -> None:
    """Any batch size, and any size of the axes the policy's ``dynamic_axes`` names (candidate
    sets); inputs and outputs named as the policy names them."""
    input_names = getattr(policy, "input_names", ("obs",))
    named_axes: dict[str, dict[int, str]] = getattr(policy, "dynamic_axes", {})
    dims = {"batch": torch.export.Dim("batch", min=1)}
    dynamic = {}
    for name in input_names:
        axes = {0: "batch", **named_axes.get(name, {})}
        dynamic[name] = {
            axis: dims.setdefault(dim, torch.export.Dim(dim, min=1)) for axis, dim in axes.items()
        }
    with quiet("torch.onnx"):  # its progress lines and warnings bury distrl's one line
        program = torch.onnx.export(
            policy,
            examples,
            input_names=list(input_names),
            output_names=list(getattr(policy, "output_names", ("action",))),
            dynamic_shapes=dynamic,
            dynamo=True,
            external_data=False,
            verbose=verbose(),
        )
    program.save(str(out))
