"""The check a sequence task gets before any process group or run dir (the algorithm registry's
``input_check`` for GRPO): every problem with prompts, tokenizer, context or reward functions is
one line."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from distrl.errors import UserError
from distrl.tasks.prompts import PromptSource, longest_prompt, read_prompt_file, task_tokenizer
from distrl.tasks.verifiers import RewardFunctions

if TYPE_CHECKING:
    from distrl.config.run import RunConfig


def check_task(cfg: RunConfig) -> None:
    task = cfg.task
    RewardFunctions(task)
    for held_out in (False, True):
        PromptSource(task, cfg.train.seed, held_out).example(0)
    tokenizer = task_tokenizer(task)
    if task.prompts:
        for row in read_prompt_file(Path(task.prompts)):
            tokenizer.encode(row.prompt, f"task.prompts {task.prompts}: prompt")
            tokenizer.encode(row.answer, f"task.prompts {task.prompts}: answer")
    prompt = longest_prompt(task)
    tokens = len(tokenizer.encode(prompt, "task prompt"))
    context, new = cfg.model.transformer.context, cfg.algo.max_new_tokens
    if tokens + new > context:
        raise UserError(
            f"task prompt {prompt!r} ({tokens} tokens) and algo.max_new_tokens={new} need {tokens + new} "
            f"positions, more than model.transformer.context={context}; raise the context or shorten them"
        )
