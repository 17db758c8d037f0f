"""Sequence packing (``algo.sequence_packing_tokens``) against padding in GRPO's loss pass, on
completions of mixed lengths: real tokens a second through the forward and backward pass, and
the positions computed.

One process, one thread. distrl's transformer (``--model``) and a batch of ``--rows``
completions whose prompts are ``--prompt`` tokens or fewer and whose completions are 1 to
``--longest`` tokens, drawn uniformly (seeded); random tokens (the pass's cost does not depend on
them). Each contender computes ``token_log_probs`` of the batch and backpropagates a loss of it:
the padded pass (distrl's default on a CPU: completions of one prompt share its pass, the long
ones fed on past the short ones), and packing into rows of each ``--budgets`` tokens. Contenders
are interleaved ``--repeats`` times; medians reported.

Usage: python benchmarks/packing_bench.py [--model "{layers: 4, width: 256, heads: 4, context: 192}"]
       [--rows 64] [--group 8] [--prompt 32] [--longest 160] [--budgets 192 1024] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import yaml


def batch(rows: int, group: int, prompt: int, longest: int, vocab: int):  # noqa: ANN201
    """``rows`` completions, ``group`` a prompt, with the lengths the usage describes."""
    from distrl.storage.completions import CompletionBatch

    gen = torch.Generator().manual_seed(0)
    prompt_lengths = torch.randint(prompt // 4, prompt + 1, (rows // group,), generator=gen)
    prompt_lengths = prompt_lengths.repeat_interleave(group)
    lengths = torch.randint(1, longest + 1, (rows,), generator=gen)
    sequences = torch.randint(1, vocab, (rows // group, prompt + longest), generator=gen).repeat_interleave(
        group, 0
    )
    completions = torch.randint(1, vocab, (rows, longest), generator=gen)
    sequences[:, prompt:] = completions
    prompt_mask = torch.arange(prompt) >= prompt - prompt_lengths[:, None]
    completion_mask = torch.arange(longest) < lengths[:, None]
    sequences[:, :prompt][~prompt_mask] = 0
    sequences[:, prompt:][~completion_mask] = 0
    attention = torch.cat([prompt_mask, completion_mask], 1)
    return CompletionBatch(sequences, attention, completion_mask, torch.randn(rows, generator=gen))


def main() -> None:
    from distrl.algos.grpo import token_log_probs
    from distrl.algos.grpo_config import TransformerConfig
    from distrl.models.transformer import TransformerLM

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="{layers: 4, width: 256, heads: 4, context: 192}")
    parser.add_argument("--vocab", type=int, default=64)
    parser.add_argument("--rows", type=int, default=64)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=32)
    parser.add_argument("--longest", type=int, default=160)
    parser.add_argument("--budgets", type=int, nargs="+", default=[192, 1024])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = TransformerLM(args.vocab, TransformerConfig(**yaml.safe_load(args.model)))
    completions = batch(args.rows, args.group, args.prompt, args.longest, args.vocab)
    real = int(completions.attention_mask.sum()) - args.rows  # each completion's last token is not fed
    contenders: dict[str, int | None] = {"padded": None, **{f"packed, rows of {b}": b for b in args.budgets}}
    seconds: dict[str, list[float]] = {name: [] for name in contenders}
    positions: dict[str, int] = {}
    for _ in range(args.repeats + 1):  # the first round warms up
        for name, budget in contenders.items():
            fed: list[int] = []
            hook = model.register_forward_pre_hook(lambda _, inputs, fed=fed: fed.append(inputs[0].numel()))
            model.zero_grad()
            start = time.perf_counter()
            log_probs, entropy = token_log_probs(model, completions, 1.0, 0, packed_tokens=budget)
            (log_probs * completions.advantages[:, None] + 0.01 * entropy).sum().backward()
            seconds[name].append(time.perf_counter() - start)
            hook.remove()
            positions[name] = sum(fed)
    print(
        f"distrl's transformer {args.model}, {args.rows} completions ({args.group} a prompt), prompts of "
        f"{args.prompt // 4}-{args.prompt} tokens, completions of 1-{args.longest}: {real:,} real tokens fed"
    )
    print("| loss pass | positions computed | s (median) | real tokens/s | vs padded |")
    print("| --- | --- | --- | --- | --- |")
    base = statistics.median(seconds["padded"][1:])
    for name in contenders:
        median = statistics.median(seconds[name][1:])
        speed = f"{real / median:,.0f} | {base / median:.2f}x"
        print(f"| {name} | {positions[name]:,} | {median:.3f} | {speed} |")


if __name__ == "__main__":
    main()
