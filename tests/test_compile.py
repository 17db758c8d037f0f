"""``train.compile``'s precondition: a C++ compiler for torch.compile on the CPU."""

from __future__ import annotations

import pytest
from torch._inductor import config as inductor_config

from distrl.compile import require_cpp_compiler
from distrl.errors import UserError


def test_compile_without_a_cpp_compiler_is_one_line() -> None:
    with inductor_config.patch({"cpp.cxx": ("/nonexistent/c++",)}), pytest.raises(UserError) as err:
        require_cpp_compiler()
    assert "train.compile=true" in str(err.value) and "\n" not in str(err.value)
