"""Reward functions: the built-in ones' values, weights, unfinished completions."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from distrl.algos.grpo_config import RewardConfig, TaskConfig
from distrl.errors import UserError
from distrl.tasks.deadline import deadline
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


def _stuck(function: str, in_thread: bool) -> tuple[UserError | None, float]:
    """Score two prompts with ``function`` (cut off after 0.5 s), on this (the main) thread or on
    another one, as a Ray verifier actor does; what it raised and how long it took."""
    task = TaskConfig(
        rewards=[RewardConfig(function=f"tests.tasks.reward_functions:{function}")], reward_timeout_s=0.5
    )
    examples = [Example("rev 1=", "1"), Example("rev 2=", "2")]
    raised: list[UserError] = []

    def score() -> None:
        try:
            RewardFunctions(task).score(examples, ["1", "2"], [True, True])
        except UserError as exc:
            raised.append(exc)

    started = time.monotonic()
    if in_thread:
        thread = threading.Thread(target=score, daemon=True)
        thread.start()
        thread.join(timeout=30)
    else:
        score()
    return (raised[0] if raised else None), time.monotonic() - started


@pytest.mark.parametrize(
    ("function", "in_thread"),
    [("never_returns", False), ("waits_forever", False), ("never_returns", True)],
    ids=["loop", "blocked", "loop-on-a-thread"],
)
def test_a_reward_function_that_never_returns_is_cut_off_with_its_prompt(
    function: str, in_thread: bool
) -> None:
    raised, took = _stuck(function, in_thread)
    assert raised is not None and took < 5
    assert str(raised) == (
        f"task.rewards: tests.tasks.reward_functions:{function} did not return within "
        "task.reward_timeout_s=0.5 s and was cut off "
        "(prompt 'rev 2=', completion '2')"
    )


def test_a_reward_deadline_leaves_a_callers_own_alarm_running() -> None:
    """A test's time limit (pytest-timeout's SIGALRM) outlives a reward call's deadline inside it."""
    signal.setitimer(signal.ITIMER_REAL, 30)
    try:
        with deadline(5):
            time.sleep(0.2)
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    assert 29 < remaining < 29.9
