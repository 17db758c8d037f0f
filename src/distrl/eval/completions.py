"""Evaluation of a sequence policy: greedy completions of held-out prompts, scored by the task's
reward functions (the GRPO analogue of ``eval.episodes``)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from distrl.algos.grpo_config import TaskConfig
from distrl.models.sequence_policy import SequencePolicy
from distrl.tasks.prompts import Example, PromptSource
from distrl.tasks.verifiers import RewardFunctions, Scores

if TYPE_CHECKING:
    from distrl.config.run import RunConfig

_BATCH = 256


def score_held_out(
    cfg: RunConfig, policy: SequencePolicy, count: int, first: int
) -> tuple[Scores, list[float]]:
    """Scores of the greedy completions of held-out prompts ``first .. first + count - 1`` (at the
    task's full length) and each one's exact match with its answer."""
    examples = _held_out_examples(cfg.task.model_dump_json(), cfg.train.seed, first, count)
    texts: list[str] = []
    ended: list[bool] = []
    for start in range(0, count, _BATCH):
        done = policy.complete([example.prompt for example in examples[start : start + _BATCH]])
        texts += done[0]
        ended += done[1]
    scores = RewardFunctions(cfg.task).score(examples, texts, ended)
    exact = [float(d and t == e.answer) for e, t, d in zip(examples, texts, ended, strict=True)]
    return scores, exact


@functools.lru_cache(maxsize=4)
def _held_out_examples(task: str, seed: int, first: int, count: int) -> tuple[Example, ...]:
    """Held-out prompts ``first .. first + count - 1`` of the task (``task``: its config as JSON).
    A run scores the same ones at every check: drawn once, since each is a search for a prompt
    on the held-out side of the hash (a thousand take about a tenth of a second)."""
    source = PromptSource(TaskConfig.model_validate_json(task), seed, held_out_side=True)
    return tuple(source.examples(range(first, first + count)))


def evaluate_completions(cfg: RunConfig, policy: SequencePolicy, episodes: int, seed: int) -> list[float]:
    """The exact match (1 or 0) of ``episodes`` held-out prompts from index ``seed``, whatever
    reward trains the policy (the registry's evaluator: ``train.stop_return`` and ``distrl eval``
    of a sequence policy are held-out accuracies)."""
    return score_held_out(cfg, policy, episodes, seed)[1]


def held_out_metrics(
    cfg: RunConfig, policy: SequencePolicy, episodes: int, seed: int
) -> dict[str, list[float]]:
    """The reward and the exact match of each of ``episodes`` held-out prompts from index ``seed``:
    GRPO's ``heldout/*``, which the loop logs every ``eval.every`` updates of a run without eval
    workers (the registry's ``periodic_eval``)."""
    scores, exact = score_held_out(cfg, policy, episodes, seed)
    return {"heldout/reward": scores.rewards, "heldout/exact_match": exact}


def task_name(cfg: RunConfig) -> str:
    """Whose held-out prompts are completed (``distrl eval``'s ``env``): a prompts file, with how
    many distinct held-out prompts it has (fewer than the episodes asked for are scored again),
    else the generated task."""
    if cfg.task.prompts is None:
        return f"task {cfg.task.name}"
    distinct = len(PromptSource(cfg.task, cfg.train.seed, held_out_side=True).rows or [])
    return f"task {cfg.task.prompts} ({distinct} distinct held-out prompts)"
