"""Reward functions: the built-in ones' values, weights, unfinished completions."""

from __future__ import annotations

import pytest

from distrl.algos.grpo_config import RewardConfig, TaskConfig
from distrl.errors import UserError
from distrl.tasks.prompts import Example
from distrl.tasks.verifiers import RewardFunctions, positional_match


def test_positional_match_gives_partial_credit_over_the_longer_string() -> None:
    assert positional_match("", "123", "123") == 1.0
    assert positional_match("", "124", "123") == pytest.approx(2 / 3)
    assert positional_match("", "12", "123") == pytest.approx(2 / 3)
    assert positional_match("", "12345", "123") == pytest.approx(3 / 5)
    assert positional_match("", "", "") == 0.0


def test_rewards_are_weighted_sums_and_unfinished_completions_get_the_stated_reward() -> None:
    task = TaskConfig(
        rewards=[RewardConfig(function="exact_match", weight=2.0), RewardConfig(function="positional_match")],
        unfinished_reward=-1.0,
    )
    examples = [Example("rev 12=", "21")] * 3
    scores = RewardFunctions(task).score(examples, ["21", "22", "21"], [True, True, False])
    assert scores.rewards == [3.0, 0.5, -1.0]
    assert scores.unfinished == 1
    assert scores.by_function == {"exact_match": [1.0, 0.0], "positional_match": [1.0, 0.5]}


def test_a_function_may_appear_once() -> None:
    twice = TaskConfig(rewards=[RewardConfig(function="exact_match")] * 2)
    with pytest.raises(UserError, match="each may appear once"):
        RewardFunctions(twice)
