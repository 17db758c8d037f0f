"""A character-level tokenizer built in code: one token per character of a fixed alphabet, plus
padding and the end token. Nothing is downloaded or trained."""

from __future__ import annotations

import string
from collections.abc import Sequence

from distrl.errors import UserError

PAD = "<pad>"
EOS = "<eos>"
ALPHABET = string.digits + string.ascii_lowercase + " +-*=:,."
"""The characters prompts and completions may hold, unless ``task.alphabet`` or a built-in task
names fewer (a smaller vocabulary is a smaller space to explore: it learns faster)."""


class CharTokenizer:
    pad_id = 0
    eos_id = 1

    def __init__(self, alphabet: str = ALPHABET) -> None:
        if len(set(alphabet)) != len(alphabet):
            raise UserError(
                f"task.alphabet {alphabet!r}: a character appears twice; list each once",
                code="task-alphabet-duplicate",
            )
        self.alphabet = alphabet
        self.tokens = [PAD, EOS, *alphabet]
        self.ids = {char: index for index, char in enumerate(self.tokens) if index > self.eos_id}

    @property
    def vocab_size(self) -> int:
        return len(self.tokens)

    def encode(self, text: str, where: str) -> list[int]:
        """Token ids of ``text``; one line naming ``where`` it came from for a character outside
        the alphabet."""
        unknown = sorted({char for char in text if char not in self.ids})
        if unknown:
            raise UserError(
                f"{where}: {text!r} has characters outside the tokenizer's alphabet ({''.join(unknown)!r}); "
                f"allowed: {self.alphabet!r}",
                code="task-characters-outside-alphabet",
            )
        return [self.ids[char] for char in text]

    def decode(self, ids: Sequence[int]) -> str:
        """The text before the first end token (padding skipped)."""
        return "".join(self.tokens[index] for index in text_ids(ids, self.eos_id, self.pad_id))


def text_ids(ids: Sequence[int], eos_id: int, pad_id: int) -> list[int]:
    """The ids before the first end token, padding left out: what a completion's text is."""
    kept = []
    for index in ids:
        if index == eos_id:
            break
        if index != pad_id:
            kept.append(index)
    return kept
