"""The check a sequence task gets before any process group or run dir (the algorithm registry's
``input_check`` for GRPO): every problem with prompts, tokenizer, context or reward functions is
one line."""

from __future__ import annotations

from typing import TYPE_CHECKING

from distrl.errors import UserError
from distrl.models.sequence_policy import sequence_context, sequence_tokenizer
from distrl.tasks.prompts import PromptSource, longest_prompt, task_file_rows
from distrl.tasks.verifiers import RewardFunctions

if TYPE_CHECKING:
    from distrl.config.run import RunConfig


def check_task(cfg: RunConfig) -> None:
    task = cfg.task
    RewardFunctions(task)
    rows = task_file_rows(task)  # read once for all the checks below
    for held_out in (False, True):
        PromptSource(task, cfg.train.seed, held_out, rows).example(0)
    tokenizer = sequence_tokenizer(cfg)
    for row in rows or ():
        tokenizer.encode(row.prompt, f"task.prompts {task.prompts}: prompt")
        tokenizer.encode(row.answer, f"task.prompts {task.prompts}: answer")
    prompt = longest_prompt(task, rows)
    tokens = len(tokenizer.encode(prompt, "task prompt"))
    (context, named), new = sequence_context(cfg), cfg.algo.max_new_tokens
    if tokens + new > context:
        raise UserError(
            f"task prompt {prompt!r} ({tokens} tokens) and algo.max_new_tokens={new} need {tokens + new} "
            f"positions, more than {named}{context}; raise the context or shorten them",
            code="grpo-prompt-too-long",
        )
