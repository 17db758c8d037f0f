"""The algorithm registry picks each run's runner by what it learns from, refuses what none
trains in one line before anything is imported, builds every algorithm's config section, and
says in which format ``output.path`` is written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from distrl.algos.registry import ALGORITHMS
from distrl.config.run import load_config
from distrl.config.run_algorithm import output_format, runner_reference
from distrl.errors import UserError


@pytest.mark.parametrize(
    ("overrides", "runner"),
    [
        ([], "distrl.runners.on_policy:OnPolicyRunner"),
        (["algo.name=dqn"], "distrl.algorithms.dqn.runner:OffPolicyRunner"),
        (["algo.name=dqn", "data.path=/logs"], "distrl.algorithms.dqn.offline_runner:OfflineRunner"),
        (["ml_framework=jax"], "distrl.runners.jax_on_policy:JaxOnPolicyRunner"),
        (["ml_framework=jax", "env.backend=gymnax"], "distrl.runners.jax_compiled:JaxCompiledRunner"),
    ],
)
def test_each_run_gets_its_runner(overrides: list[str], runner: str) -> None:
    assert runner_reference(load_config(None, overrides)) == runner


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["data.path=/logs"], "algo.name=ppo does not train from logged data (data.path); known: dqn"),
        (["ml_framework=jax", "algo.name=dqn"], "ml_framework: jax trains ppo online"),
        (["ml_framework=jax", "data.path=/logs"], "ml_framework: jax trains ppo online"),
        (
            ["algo.name=dqn", "model.memory=lstm"],
            "model.memory=lstm: algo.name=dqn has no recurrent policies yet; use model.memory=none, "
            "or ppo or a2c or appo with ml_framework: torch",
        ),
        (["ml_framework=jax", "model.memory=gru"], "model.memory=gru: the JAX learner has no recurrent"),
    ],
)
def test_what_no_runner_trains_is_one_line(overrides: list[str], message: str) -> None:
    with pytest.raises(UserError, match=re.escape(message)):
        runner_reference(load_config(None, overrides))


def test_every_algorithm_names_modules_that_exist() -> None:
    """Each ``module:attribute`` reference resolves (imported here, as a run would)."""
    from distrl.algos.registry import load

    for algorithm in ALGORITHMS.values():
        references = [
            algorithm.deployable_policy, algorithm.collector, algorithm.acting, *algorithm.runners.values(),
            algorithm.evaluator, algorithm.evaluated_on, algorithm.input_check,
            *algorithm.exports.values(), algorithm.export_check,
        ]  # fmt: skip
        for reference in references:
            if reference is not None:
                assert callable(load(reference)), reference


@pytest.mark.parametrize(
    ("overrides", "path", "fmt"),
    [
        ([], "model/policy.onnx", "onnx"),
        ([], "model/policy.pt", "torchscript"),
        (["algo.name=grpo"], "model/policy.onnx", "transformers"),  # the only one it writes
    ],
)
def test_output_path_is_written_in_the_format_its_suffix_names_else_the_first(
    overrides: list[str], path: str, fmt: str
) -> None:
    assert output_format(load_config(None, overrides), Path(path)) == fmt
