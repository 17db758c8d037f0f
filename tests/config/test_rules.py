"""The rules that span a run's sections (``config.rules``), each one line naming the config, at
load time: here the normalisers only PPO's runner keeps."""

from __future__ import annotations

from pathlib import Path

import pytest

from distrl.config.run import load_config
from distrl.errors import UserError
from tests.helpers import CARTPOLE_A2C, CARTPOLE_DQN, GRPO_REVERSE, PENDULUM_SAC, REPO

NORMALIZERS = ["normalize.observations=true", "normalize.rewards=true"]


@pytest.mark.parametrize("config", [CARTPOLE_DQN, PENDULUM_SAC, GRPO_REVERSE], ids=["dqn", "sac", "grpo"])
@pytest.mark.parametrize("normalizer", NORMALIZERS)
def test_normalisers_are_refused_by_an_algorithm_that_keeps_none(config: Path, normalizer: str) -> None:
    with pytest.raises(UserError) as refused:
        load_config(config, [normalizer])
    said = str(refused.value)
    assert refused.value.code == "algo-normalize-ppo-only" and "\n" not in said
    assert said.startswith(
        f"{config}: normalize.observations and normalize.rewards are for PPO, A2C and APPO"
    )


@pytest.mark.parametrize(
    "config", [CARTPOLE_A2C, REPO / "configs" / "cartpole_appo.yaml"], ids=["a2c", "appo"]
)
def test_the_on_policy_algorithms_keep_them(config: Path) -> None:
    assert load_config(config, NORMALIZERS).normalize.rewards
