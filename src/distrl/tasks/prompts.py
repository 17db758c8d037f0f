"""Prompts with their answers, by global index: prompt i of a run is the same on any number of
ranks, so ranks split a step's prompts by index and a resumed run continues the sequence.

Built-in generators draw digit problems (``task.name``) whose length follows the curriculum; a
file (``task.prompts``) is read in a seeded order, epoch after epoch. Either way a fixed share of
all prompts, chosen by a hash of the prompt text, is held out: training never sees them and
evaluation scores only them (a generator's at ``task.max_length``).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from distrl.algos.grpo_config import TaskConfig
from distrl.errors import UserError
from distrl.tasks.tokenizer import CharTokenizer

MAX_DRAWS = 1000
"""Draws to find a prompt on the wanted side of the held-out split before giving up."""


@dataclass(frozen=True)
class Example:
    prompt: str
    answer: str


def _digits(rng: np.random.Generator, length: int) -> str:
    return "".join(str(d) for d in rng.integers(0, 10, size=length))


def _number(rng: np.random.Generator, length: int) -> int:
    """A number of exactly ``length`` digits (0-9 for one)."""
    low = 10 ** (length - 1) if length > 1 else 0
    return int(rng.integers(low, 10**length))


def reverse_digits(rng: np.random.Generator, length: int) -> Example:
    digits = _digits(rng, length)
    return Example(f"rev {digits}=", digits[::-1])


def sort_digits(rng: np.random.Generator, length: int) -> Example:
    digits = _digits(rng, length)
    return Example(f"sort {digits}=", "".join(sorted(digits)))


def add_numbers(rng: np.random.Generator, length: int) -> Example:
    a, b = _number(rng, length), _number(rng, length)
    return Example(f"{a}+{b}=", str(a + b))


def count_digit(rng: np.random.Generator, length: int) -> Example:
    """How often a digit occurs in a digit string: a one-character answer read off the whole prompt."""
    digit, digits = str(rng.integers(0, 10)), _digits(rng, length)
    return Example(f"cnt {digit} {digits}=", str(digits.count(digit)))


def increment_digits(rng: np.random.Generator, length: int) -> Example:
    """Copy a digit string with a rule: every digit one up, 9 to 0."""
    digits = _digits(rng, length)
    return Example(f"inc {digits}=", "".join(str((int(d) + 1) % 10) for d in digits))


def max_digit(rng: np.random.Generator, length: int) -> Example:
    """The largest digit of a digit string: a short answer."""
    digits = _digits(rng, length)
    return Example(f"max {digits}=", max(digits))


GENERATORS: dict[str, Callable[[np.random.Generator, int], Example]] = {
    "reverse": reverse_digits,
    "sort": sort_digits,
    "add": add_numbers,
    "count": count_digit,
    "increment": increment_digits,
    "max": max_digit,
}
ALPHABETS = {
    "reverse": "0123456789rev =",
    "sort": "0123456789sort =",
    "add": "0123456789+=",
    "count": "0123456789cnt =",
    "increment": "0123456789inc =",
    "max": "0123456789max =",
}
"""The characters each generator's prompts and answers use."""


def task_tokenizer(task: TaskConfig) -> CharTokenizer:
    """The tokenizer of ``task``: ``task.alphabet``, else the built-in generator's characters, or
    the default alphabet for a prompt file."""
    if task.alphabet is not None:
        return CharTokenizer(task.alphabet)
    return CharTokenizer(ALPHABETS[task.name]) if task.prompts is None else CharTokenizer()


def held_out(example: Example, fraction: float) -> bool:
    """Whether ``example`` belongs to the held-out share (a stable hash of its prompt)."""
    return zlib.crc32(example.prompt.encode()) % 10_000 < fraction * 10_000


class Prompts(Protocol):
    """What serves a learner its training prompts by global index: ``PromptSource`` in its own
    process, or its share of Ray's prompt workers (``ray.prompt_workers``)."""

    def examples(self, indices: Sequence[int], progress: float = 1.0) -> list[Example]: ...


class PromptSource:
    """Training or held-out prompts of ``task``, by global index."""

    def __init__(
        self, task: TaskConfig, seed: int, held_out_side: bool, file_rows: list[Example] | None = None
    ) -> None:
        """``file_rows``: ``task.prompts``'s rows when already read (else read here)."""
        self.task = task
        self.seed = seed
        self.held_out_side = held_out_side
        self.rows = file_rows if file_rows is not None else task_file_rows(task)
        if self.rows is not None:
            self.rows = [row for row in self.rows if held_out(row, task.held_out_fraction) == held_out_side]
            if not self.rows:
                side = "held out" if held_out_side else "left for training"
                raise UserError(
                    f"task.prompts {task.prompts}: no prompt is {side} with task.held_out_fraction="
                    f"{task.held_out_fraction}; add prompts or change the fraction",
                    code="task-held-out-side-empty",
                )

    def example(self, index: int, progress: float = 1.0) -> Example:
        """Prompt ``index``; ``progress``: the share of training done (the curriculum's clock)."""
        if self.rows is not None:
            epoch, position = divmod(index, len(self.rows))
            order = np.random.default_rng([self.seed, epoch]).permutation(len(self.rows))
            return self.rows[order[position]]
        rng = np.random.default_rng([self.seed, index])
        longest = self.longest_length(progress)
        # Held-out prompts are all at the full length: the evaluation is of the hardest problems.
        shortest = longest if self.held_out_side else self.task.min_length
        for _ in range(MAX_DRAWS):
            length = int(rng.integers(shortest, longest + 1))
            example = GENERATORS[self.task.name](rng, length)
            if held_out(example, self.task.held_out_fraction) == self.held_out_side:
                return example
        raise UserError(
            f"task.name={self.task.name}: no {'held-out' if self.held_out_side else 'training'} prompt "
            f"of at most {longest} digits in {MAX_DRAWS} draws; raise task.min_length or change "
            "task.held_out_fraction",
            code="task-no-prompt-drawn",
        )

    def examples(self, indices: Sequence[int], progress: float = 1.0) -> list[Example]:
        return [self.example(index, progress) for index in indices]

    def longest_length(self, progress: float) -> int:
        """The curriculum: the longest length drawn after ``progress`` of training."""
        task = self.task
        if task.curriculum_fraction == 0.0 or self.held_out_side:
            return task.max_length
        grown = min(progress / task.curriculum_fraction, 1.0) * (task.max_length - task.min_length)
        return task.min_length + int(grown)


def longest_prompt(task: TaskConfig, file_rows: list[Example] | None = None) -> str:
    """The longest prompt the task can give: its file's (``file_rows`` when already read), or a
    generator's at ``max_length``."""
    rows = file_rows if file_rows is not None else task_file_rows(task)
    if rows is not None:
        return max((row.prompt for row in rows), key=len)
    return GENERATORS[task.name](np.random.default_rng(0), task.max_length).prompt


def task_file_rows(task: TaskConfig) -> list[Example] | None:
    """The rows of ``task.prompts``; None for a built-in generator."""
    return read_prompt_file(Path(task.prompts)) if task.prompts else None


def read_prompt_file(path: Path) -> list[Example]:
    """Rows of a JSONL file or a Parquet file or directory, each with ``prompt`` and ``answer``."""
    where = f"task.prompts {path}"
    if not path.exists():
        raise UserError(f"{where}: no such file or directory", code="task-prompts-file-missing")
    if path.suffix in (".jsonl", ".json"):
        records = []
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as exc:
                    raise UserError(
                        f"{where} line {number}: not JSON: {exc.msg}", code="task-prompts-not-json"
                    ) from None
    else:
        import pyarrow.parquet as pq

        records = pq.read_table(path).to_pylist()
    rows = []
    for number, record in enumerate(records, start=1):
        if not isinstance(record, dict) or not all(
            isinstance(record.get(k), str) for k in ("prompt", "answer")
        ):
            raise UserError(
                f"{where} row {number}: needs string fields prompt and answer (got {record!r:.80})",
                code="task-prompts-row-fields",
            )
        rows.append(Example(record["prompt"], record["answer"]))
    if not rows:
        raise UserError(f"{where}: holds no prompts", code="task-prompts-empty")
    return rows
