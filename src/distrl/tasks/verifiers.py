"""Reward functions: each scores a completion of a prompt given the prompt's answer; a task's
reward is their weighted sum (``task.rewards``). A completion that never ended is not scored: it
gets ``task.unfinished_reward``."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from distrl.algos.grpo_config import TaskConfig
from distrl.errors import UserError
from distrl.tasks.deadline import DeadlinePassed, deadline
from distrl.tasks.prompts import Example
from distrl.user_code import load, user_frame

Verifier = Callable[[str, str, str], float]
"""``(prompt, completion, answer) -> reward``."""


def exact_match(prompt: str, completion: str, answer: str) -> float:
    return float(completion == answer)


def positional_match(prompt: str, completion: str, answer: str) -> float:
    """Partial credit: the share of positions where completion and answer agree, over the longer
    of the two (so extra or missing characters cost as wrong ones do)."""
    longer = max(len(completion), len(answer), 1)
    return sum(a == b for a, b in zip(completion, answer, strict=False)) / longer


BUILT_IN: dict[str, Verifier] = {"exact_match": exact_match, "positional_match": positional_match}


def load_verifier(name: str) -> Verifier:
    """A built-in verifier by name, or a user's ``module:function``."""
    if name in BUILT_IN:
        return BUILT_IN[name]
    if ":" not in name:
        raise UserError(
            f"task.rewards: function {name!r}: expected {' or '.join(BUILT_IN)}, or module:function",
            code="task-reward-unknown",
        )
    function = load(name, f"task.rewards: function {name!r}")
    if not callable(function):
        raise UserError(
            f"task.rewards: {name!r} is not a function; name one as module:function",
            code="task-reward-not-function",
        )
    return function


@dataclass
class Scores:
    rewards: list[float]
    """Each completion's reward (the weighted sum, or ``unfinished_reward``)."""
    by_function: dict[str, list[float]]
    """Each function's own score of every finished completion."""
    unfinished: int

    @classmethod
    def joined(cls, parts: Sequence[Scores]) -> Scores:
        """The scores of consecutive parts of a batch, as one batch's."""
        names = parts[0].by_function if parts else {}
        return cls(
            [reward for part in parts for reward in part.rewards],
            {name: [value for part in parts for value in part.by_function[name]] for name in names},
            sum(part.unfinished for part in parts),
        )


class Scorer(Protocol):
    """What scores a learner's completions: ``RewardFunctions`` in its own process, or its share of
    Ray's verifier workers (``ray.verifier_workers``)."""

    def score(
        self, examples: Sequence[Example], completions: Sequence[str], ended: Sequence[bool]
    ) -> Scores: ...


class RewardFunctions:
    def __init__(self, task: TaskConfig) -> None:
        # Metrics by the function's own name (``reward/<name>``), errors by its whole reference.
        self.functions = [
            (r.function.rpartition(":")[2], r.function, load_verifier(r.function), r.weight)
            for r in task.rewards
        ]
        names = [name for name, _, _, _ in self.functions]
        if len(set(names)) < len(names):
            raise UserError(
                f"task.rewards: functions {', '.join(names)}: each may appear once (weigh it instead)",
                code="task-reward-twice",
            )
        self.unfinished_reward = task.unfinished_reward
        self.timeout_s = task.reward_timeout_s

    def score(self, examples: Sequence[Example], completions: Sequence[str], ended: Sequence[bool]) -> Scores:
        scores = Scores([], {name: [] for name, _, _, _ in self.functions}, 0)
        for example, completion, done in zip(examples, completions, ended, strict=True):
            if not done:
                scores.rewards.append(self.unfinished_reward)
                scores.unfinished += 1
                continue
            total = 0.0
            for name, reference, function, weight in self.functions:
                value = _call(reference, function, example, completion, self.timeout_s)
                scores.by_function[name].append(value)
                total += weight * value
            scores.rewards.append(total)
        return scores


def _call(name: str, function: Verifier, example: Example, completion: str, timeout_s: float | None) -> float:
    """One score; a function (``name``: as ``task.rewards`` names it) that raises, runs past
    ``timeout_s`` or returns anything but a finite number is one line naming it and the prompt."""
    try:
        with deadline(timeout_s):
            value = function(example.prompt, completion, example.answer)
    except DeadlinePassed:
        raise UserError(
            f"task.rewards: {name} did not return within task.reward_timeout_s={timeout_s:g} s and was "
            f"cut off (prompt {example.prompt!r}, completion {completion!r})",
            code="task-reward-timeout",
        ) from None
    except Exception as exc:  # a user's function: any failure is theirs to fix
        raise UserError(
            f"task.rewards: {name} raised {type(exc).__name__}: {exc} at {user_frame(exc)} (prompt "
            f"{example.prompt!r}, completion {completion!r})",
            code="task-reward-raised",
        ) from None
    if not isinstance(value, int | float) or not math.isfinite(value):
        raise UserError(
            f"task.rewards: {name} returned {value!r} for prompt {example.prompt!r} (completion "
            f"{completion!r}); it must return a finite number",
            code="task-reward-not-finite",
        )
    return float(value)
