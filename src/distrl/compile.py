"""``train.compile``: what runs through ``torch.compile`` (PPO's loss with its backward pass, and
acting during collection), and the check that it can run at all."""

from __future__ import annotations

from collections.abc import Callable
from typing import ParamSpec, TypeVar

import torch

from distrl.errors import UserError

P = ParamSpec("P")
R = TypeVar("R")


def require_cpp_compiler() -> None:
    """``torch.compile`` on the CPU builds C++: fail with one line, before training, without one."""
    from torch._inductor.cpp_builder import get_cpp_compiler
    from torch._inductor.exc import InvalidCxxCompiler

    try:
        get_cpp_compiler()
    except InvalidCxxCompiler:
        raise UserError(
            "train.compile=true: torch.compile on the CPU needs a C++ compiler (g++, or the one "
            "the CXX environment variable names); install one or set train.compile=false",
            code="train-compile-no-compiler",
        ) from None


def compiled_if(enabled: bool, fn: Callable[P, R], device: torch.device) -> Callable[P, R]:
    """``fn`` through ``torch.compile`` when ``enabled``, else ``fn`` itself."""
    if not enabled:
        return fn
    if device.type == "cpu":
        require_cpp_compiler()
    return torch.compile(fn)
