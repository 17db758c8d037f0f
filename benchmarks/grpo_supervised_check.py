"""Can a GRPO task config's transformer learn its task at all? The same model (2 layers, width 64,
from random weights) trained supervised, cross-entropy on each answer and its end token, on the
task's own generator: what GRPO fails to reach is then the reinforcement learning's, not the
model's (issue 57: ``count``).

Reported every 500 batches of 256 prompts: the training loss and the exact match of the answer
(and its end token, each predicted from the true ones before it) on 1,000 fresh prompts of the
longest length.

Usage: python benchmarks/grpo_supervised_check.py [--task count] [--min-length 3] [--max-length 5]
       [--batches 2501]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.nn.functional as F

from distrl.algos.grpo_config import TransformerConfig
from distrl.models.transformer import TransformerLM
from distrl.tasks.prompts import ALPHABETS, GENERATORS
from distrl.tasks.tokenizer import CharTokenizer

IGNORED = -100
"""The target of a position that predicts no answer token."""


def labelled_batch(
    tokenizer: CharTokenizer, task: str, rng: np.random.Generator, size: int, lengths: tuple[int, int]
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Left-padded prompt-and-answer tokens, their mask, and each position's target: the next
    token where it is one of the answer's or its end token."""
    rows = []
    for _ in range(size):
        example = GENERATORS[task](rng, int(rng.integers(lengths[0], lengths[1] + 1)))
        prompt = tokenizer.encode(example.prompt, "prompt")
        rows.append((prompt, tokenizer.encode(example.answer, "answer") + [tokenizer.eos_id]))
    width = max(len(prompt) + len(answer) for prompt, answer in rows)
    tokens = torch.full((size, width), tokenizer.pad_id)
    targets = torch.full((size, width), IGNORED)
    for row, (prompt, answer) in enumerate(rows):
        first = width - len(prompt) - len(answer)
        tokens[row, first:] = torch.tensor(prompt + answer)
        targets[row, first + len(prompt) - 1 : width - 1] = torch.tensor(answer)
    return tokens, tokens != tokenizer.pad_id, targets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--task", default="count", choices=sorted(GENERATORS))
    parser.add_argument("--min-length", type=int, default=3)
    parser.add_argument("--max-length", type=int, default=5)
    parser.add_argument("--batches", type=int, default=2501)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    tokenizer = CharTokenizer(ALPHABETS[args.task])
    model = TransformerLM(tokenizer.vocab_size, TransformerConfig(layers=2, width=64, heads=4, context=24))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for batch in range(args.batches):
        tokens, mask, targets = labelled_batch(
            tokenizer, args.task, rng, 256, (args.min_length, args.max_length)
        )
        logits, _ = model(tokens, mask)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORED)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if batch % 500 == 0 or batch == args.batches - 1:
            with torch.no_grad():
                tokens, mask, targets = labelled_batch(
                    tokenizer, args.task, rng, 1000, (args.max_length,) * 2
                )
                predicted = model(tokens, mask)[0].argmax(-1)
                exact = ((predicted == targets) | (targets == IGNORED)).all(1).double().mean()
            print(
                f"batch {batch}: loss {loss.item():.3f}, exact match {float(exact):.3f} "
                f"({args.max_length} digits), {time.perf_counter() - start:.0f} s",
                flush=True,
            )


if __name__ == "__main__":
    main()
