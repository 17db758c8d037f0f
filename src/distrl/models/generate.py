"""Completions of prompts by a sequence policy, decoded with a KV cache.

Sampling is Gumbel-max: a row's token at step t is the arg-max of its (temperature-scaled,
top-k/top-p filtered) logits plus Gumbel noise. Each prompt's noise comes from its own generator,
seeded by the caller from the prompt's global index and the training step
(``seeding.completion_seed``), never the rank; its j-th completion takes the j-th draw. So a
completion is the same whichever rank, batch or padding it was generated in, and 1 and N learners
generate the same completions. Without seeds decoding is greedy.

A prompt's completions (GRPO's group) share its prefix: the prompt is fed once and its keys and
values are copied to each completion, rather than computed once per completion as a generator fed
repeated prompts does. Once a quarter of the completions fed have ended, those leave the batch
(their rows of the cache with them), so later steps compute mostly the completions still going.

Each token's log-probability under the generating policy, and the entropy of the distribution it
was drawn from, are kept as it is chosen (at the sampling temperature, before top-k/top-p: the
policy GRPO's ratios compare with), so no second pass over the completions is needed for them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from distrl.models.transformer import KVCache, normalised, repeat_rows
from distrl.seeding import draw_seed

if TYPE_CHECKING:
    from distrl.models.pretrained import PretrainedCache
    from distrl.models.sequence_model import SequenceModel


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float = 1.0


@dataclass
class Completions:
    prompts: torch.Tensor
    """``[batch, prompt_length]``, left-padded."""
    prompt_mask: torch.Tensor
    tokens: torch.Tensor
    """``[batch, new_tokens]``: each row's completion, its end token included, padding after."""
    mask: torch.Tensor
    """True on a completion's tokens (its end token included)."""
    ended: torch.Tensor
    """``[batch]``: the completion produced the end token."""
    log_probs: torch.Tensor | None
    """``[batch, new_tokens]``: each token's log-probability under the generating policy
    (``policy_log_softmax``), 0 after the completion's end; None unless ``keep_log_probs``."""
    entropy: torch.Tensor | None
    """``[batch, new_tokens]``: the entropy of the distribution each token was drawn from, 0
    after the completion's end; None unless ``keep_log_probs``."""

    def sequences(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Prompt and completion side by side, and where real tokens are."""
        return torch.cat([self.prompts, self.tokens], 1), torch.cat([self.prompt_mask, self.mask], 1)


def left_padded(
    rows: Sequence[Sequence[int]], pad_id: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[batch, longest]`` token ids padded on the left, and the mask of real tokens."""
    longest = max(len(row) for row in rows)
    tokens = torch.full((len(rows), longest), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros(len(rows), longest, dtype=torch.bool, device=device)
    for index, row in enumerate(rows):
        if row:
            tokens[index, longest - len(row) :] = torch.as_tensor(row, device=device)
            mask[index, longest - len(row) :] = True
    return tokens, mask


def policy_logits(logits: torch.Tensor, temperature: float, pad_id: int) -> torch.Tensor:
    """The logits the policy samples from: at least float32 (float64 where the model is), scaled
    by the sampling temperature, and the padding token's -inf: padding is never generated (it
    would vanish from the decoded text), and the loss's log-probabilities exclude it alike."""
    scaled = logits.to(torch.promote_types(logits.dtype, torch.float32)) / temperature
    return scaled.index_fill(-1, torch.tensor([pad_id], device=logits.device), -torch.inf)


def policy_log_softmax(logits: torch.Tensor, temperature: float, pad_id: int) -> torch.Tensor:
    """The policy's log-probabilities from its logits (``policy_logits``)."""
    return normalised(policy_logits(logits, temperature, pad_id), log=True)


def entropy_of(log_softmax: torch.Tensor) -> torch.Tensor:
    """The entropy of each distribution given as log-probabilities (-inf ones contribute 0)."""
    return -(log_softmax.exp() * log_softmax.clamp(min=torch.finfo(log_softmax.dtype).min)).sum(-1)


def chosen_log_probs_and_entropy(
    log_softmax: torch.Tensor, chosen: torch.Tensor, real: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each chosen token's log-probability and the entropy of the distribution it was chosen
    from, 0 where ``real`` is False (past a completion's end padding has probability 0: its -inf
    would be NaN)."""
    log_probs = log_softmax.gather(-1, chosen.unsqueeze(-1)).squeeze(-1).masked_fill(~real, 0.0)
    return log_probs, entropy_of(log_softmax).masked_fill(~real, 0.0)


def filter_scaled_logits(scaled: torch.Tensor, sampling: Sampling) -> torch.Tensor:
    """Temperature-scaled logits (``policy_logits``) with those outside the top k, and outside
    the smallest set whose probability reaches top_p, set to -inf."""
    if sampling.top_k is not None and sampling.top_k < scaled.shape[-1]:
        kth = scaled.topk(sampling.top_k, dim=-1).values[..., -1:]
        scaled = scaled.masked_fill(scaled < kth, -torch.inf)
    if sampling.top_p < 1.0:
        ordered, order = scaled.sort(dim=-1, descending=True)
        before = ordered.softmax(-1).cumsum(-1) - ordered.softmax(-1)  # probability of the better ones
        drop = (before >= sampling.top_p).scatter(-1, order, before >= sampling.top_p)
        scaled = scaled.masked_fill(drop, -torch.inf)
    return scaled


@torch.no_grad()
def generate(
    model: SequenceModel,
    prompts: torch.Tensor,
    prompt_mask: torch.Tensor,
    max_new_tokens: int,
    eos_id: int,
    pad_id: int,
    sampling: Sampling = Sampling(),
    seeds: Sequence[int] | None = None,
    use_cache: bool = True,
    copies: int = 1,
    keep_log_probs: bool = False,
    any_running: Callable[[int], bool] | None = None,
) -> Completions:
    """``copies`` completions of each prompt row, up to ``max_new_tokens`` tokens each: rows
    ``i * copies`` to ``(i + 1) * copies - 1`` of the result are prompt i's. Sampled with prompt
    i's noise from ``seeds[i]``, or greedy without ``seeds``. ``use_cache=False`` feeds every
    completion's whole sequence every step (the reference the cached path is tested against).
    ``keep_log_probs``: keep each token's log-probability and entropy (``Completions``).
    ``any_running``: given how many of this process's rows are still running, whether any row of
    any rank is: ranks that decode in lockstep (a sharded model's passes are collectives) run
    until every rank's rows have ended."""
    # The noise in float32 at least: a sharded model gathered in bf16 samples as its float32 self.
    dtype = torch.promote_types(next(model.parameters()).dtype, torch.float32)
    rows, row_mask = prompts.repeat_interleave(copies, 0), prompt_mask.repeat_interleave(copies, 0)
    batch, device = rows.shape[0], prompts.device
    noise = None if seeds is None else GumbelNoise(seeds, copies, model.vocab_size, dtype, device)
    tokens = torch.full((batch, max_new_tokens), pad_id, dtype=torch.long, device=device)
    mask = torch.zeros(batch, max_new_tokens, dtype=torch.bool, device=device)
    log_probs = entropy = None
    if keep_log_probs:
        log_probs = torch.zeros(
            batch, max_new_tokens, dtype=torch.promote_types(dtype, torch.float32), device=device
        )
        entropy = torch.zeros_like(log_probs)
    running = torch.ones(batch, dtype=torch.bool, device=device)
    # The rows the model computes this step, in the cache's order: every row (a slice, cheaper to
    # index with), or with a cache that selects rows, those still running at the last drop.
    fed: slice | torch.Tensor = slice(None)
    cache: KVCache | PretrainedCache | None = None
    # Inference mode skips autograd's bookkeeping on every operation; what leaves holds only
    # tensors made outside it, which training may use. Ranks in lockstep run a sharded model,
    # whose gathering of weights inference mode refuses.
    with torch.inference_mode() if any_running is None else torch.no_grad():
        for step in range(max_new_tokens):
            if not use_cache:
                so_far = torch.cat([rows, tokens[:, :step]], 1), torch.cat([row_mask, mask[:, :step]], 1)
                logits, _ = model(*so_far)
            elif cache is not None:
                logits, cache = model(tokens[fed, step - 1 : step], mask[fed, step - 1 : step], cache)
            elif copies > 1 and model.repeatable_cache:  # each prompt once, then its completions apart
                logits, cache = prompts_fed_once(model, prompts, prompt_mask, copies)
            else:  # once per completion: a cache that cannot be copied row by row
                logits, cache = model(rows, row_mask)
            scaled = policy_logits(logits[:, -1], sampling.temperature, pad_id)
            if noise is None:
                chosen = scaled.argmax(-1)
            else:
                chosen = (filter_scaled_logits(scaled, sampling) + noise.next_step()[fed]).argmax(-1)
            going = running[fed]
            tokens[fed, step] = torch.where(going, chosen, pad_id)
            mask[fed, step] = going
            if log_probs is not None and entropy is not None:
                log_probs[fed, step], entropy[fed, step] = chosen_log_probs_and_entropy(
                    normalised(scaled, log=True), chosen, going
                )
            still = going & (chosen != eos_id)
            running[fed] = still
            remaining = int(still.sum())  # one read of the device's result per step
            if not (any_running(remaining) if any_running is not None else remaining):
                break
            # Copying the cache's rows costs about what a quarter of the rows' next step would.
            if use_cache and model.repeatable_cache and remaining <= 0.75 * len(still):
                kept = still.nonzero().squeeze(1)
                fed, cache = torch.arange(batch, device=device)[fed][kept], cache.select_rows(kept)
    return Completions(rows, row_mask, tokens, mask, ~running, log_probs, entropy)


def prompts_fed_once(
    model: SequenceModel, prompts: torch.Tensor, prompt_mask: torch.Tensor, copies: int | torch.Tensor
) -> tuple[torch.Tensor, KVCache | PretrainedCache]:
    """The logits at each prompt's last position and the cache after it, from one pass over the
    prompts, each row copied ``copies`` times side by side (one count for all, or one per row)
    for its completions; the model's cache must copy row by row (``repeatable_cache``)."""
    logits, cache = model(prompts, prompt_mask)
    return repeat_rows(logits[:, -1:], copies), cache.repeat_rows(copies)


class GumbelNoise:
    """Gumbel noise for sampling, one decoding step at a time (``[rows, vocab]`` held, not a row's
    every step: with a large vocabulary and long completions that would be gigabytes). Row
    ``i * draws + j`` (seed i's draw j) comes from a generator of its own, so a completion's noise
    is the same however many completions are drawn with it and however long they may grow."""

    def __init__(
        self, seeds: Sequence[int], draws: int, vocab: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        self.generators = [
            torch.Generator().manual_seed(draw_seed(seed, draw)) for seed in seeds for draw in range(draws)
        ]
        self.uniform = torch.empty(len(self.generators), vocab, dtype=torch.float64)
        self.dtype, self.device = dtype, device

    def next_step(self) -> torch.Tensor:
        """Every row's noise for the next decoding step (drawn for rows that ended too, so each
        row's sequence of draws never depends on the others)."""
        for row, generator in zip(self.uniform, self.generators, strict=True):
            row.uniform_(generator=generator)
        gumbel = self.uniform.clamp(1e-20, 1.0 - 1e-16).log_().neg_().log_().neg_()
        return gumbel.to(self.device, self.dtype)
