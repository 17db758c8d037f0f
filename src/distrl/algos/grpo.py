"""Group Relative Policy Optimization (Shao et al. 2024, DeepSeekMath), for sequence policies.

Each prompt's G completions form a group; a completion's advantage is its reward minus a baseline
from its group (``group_advantages``), the same for all its tokens. The loss is PPO's clipped
surrogate per token, with separate lower and upper clip bounds, plus an optional KL penalty to a
frozen reference policy and an optional entropy bonus, normalised per token or per sequence
(``GRPO.loss``).

The update is rank-agnostic: each rank's loss is a mean over its local tokens (or completions),
and ``FlatGradients`` turns the ranks' gradients into the mean over all of them, weighted by those
same counts, so N ranks step as one would on the whole batch.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

from distrl import precision
from distrl.algos.flat_gradients import GradientSync, gradients_for, set_learning_rate
from distrl.algos.grpo_config import GRPOConfig
from distrl.comm.sharded import is_sharded
from distrl.models.generate import chosen_log_probs_and_entropy, policy_log_softmax, prompts_fed_once
from distrl.offload import optimizer_for
from distrl.storage.completions import CompletionBatch
from distrl.storage.packing import pack_sequences
from distrl.timing import PhaseClock

if TYPE_CHECKING:
    from distrl.models.pretrained import PretrainedCache
    from distrl.models.sequence_policy import SequenceModel
    from distrl.models.transformer import KVCache


def group_advantages(rewards: torch.Tensor, baseline: str, scale_by_std: bool) -> torch.Tensor:
    """``[prompts, G]`` rewards to advantages. ``leave_one_out``: r_i minus the mean of the other
    G-1, i.e. G/(G-1) (r_i - mean); ``mean``: r_i - mean. A group of equal rewards gives exactly
    zero (no float residue from the mean)."""
    size = rewards.shape[1]
    advantages = rewards - rewards.mean(1, keepdim=True)
    if baseline == "leave_one_out":
        advantages = advantages * (size / (size - 1))
    if scale_by_std:
        advantages = advantages / (rewards.std(1, keepdim=True) + 1e-6)
    flat = (rewards == rewards[:, :1]).all(1, keepdim=True)
    return advantages.masked_fill(flat, 0.0)


def entropy_coefficient(cfg: GRPOConfig, entropy: float) -> float:
    """The entropy bonus's weight for a batch whose sampling policy has mean token ``entropy``
    (over all ranks): ``entropy_coef``, raised by target/entropy (at most ``entropy_boost_max``
    times) while below ``entropy_target``. It depends on the batch alone, not on earlier ones,
    so N ranks and a resumed run weigh it alike."""
    if cfg.entropy_target is None or entropy >= cfg.entropy_target:
        return cfg.entropy_coef
    return cfg.entropy_coef * min(cfg.entropy_target / max(entropy, 1e-12), cfg.entropy_boost_max)


def kl_estimate(log_probs: torch.Tensor, reference: torch.Tensor, cfg: GRPOConfig) -> torch.Tensor:
    """Per-token estimate of KL(policy || reference) from samples of the policy."""
    log_r = (reference - log_probs).clamp(-cfg.kl_input_clamp, cfg.kl_input_clamp)
    if cfg.kl_estimator == "k1":
        estimate = -log_r
    elif cfg.kl_estimator == "k2":
        estimate = 0.5 * log_r**2
    else:
        estimate = log_r.exp() - 1.0 - log_r
    return estimate.clamp(-cfg.kl_output_clamp, cfg.kl_output_clamp)


def completion_logits(
    model: SequenceModel, batch: CompletionBatch, packed_tokens: int | None = None
) -> torch.Tensor:
    """``[completions, longest, vocab]``: the logits that predict each completion token, up to
    the longest completion's length (nothing past a completion's end is read, so no longer
    sequence is fed). ``packed_tokens``: the sequences packed into rows of this many tokens
    (``_packed_completion_logits``). Else, on a CPU, completions side by side with the same
    prompt (a group, or part of one) share it, as in generation: it is fed once, and its keys and
    values are copied to each of them (their gradients add up there), instead of once per
    completion; then the completions are fed in up to two parts (``_completions_fed``)."""
    new = batch.new_tokens
    lengths = batch.completion_mask.sum(1)
    longest = int(lengths.max()) if len(batch) else 1  # an empty batch (a rank with none): 1 step
    if packed_tokens is not None:
        return _packed_completion_logits(model, batch, lengths, longest, packed_tokens)
    prompts, prompt_mask = batch.sequences[:, :-new], batch.attention_mask[:, :-new]
    # The completion tokens that predict later ones: all but the last of the longest.
    fed, fed_mask = (
        batch.sequences[:, -new : -new + longest - 1],
        batch.attention_mask[:, -new : -new + longest - 1],
    )
    # On a GPU the prompt's own pass launches as many kernels again, which cost more than the
    # arithmetic it saves at the sizes measured (BENCHMARKS.md). Under activation checkpointing
    # the copied keys and values would be kept as every block's inputs: the memory it is for.
    # A sharded model's passes are collectives, which every rank must run alike: one pass each.
    counts = None
    shared_prompts = (
        model.repeatable_cache and not model.activation_checkpointing and not is_sharded(model.parameters())
    )
    if batch.sequences.device.type == "cpu" and shared_prompts:
        # Grouped on tokens and mask alike: a prompt's text may hold the padding token itself.
        marked = prompts.masked_fill(~prompt_mask, -1)
        counts = torch.unique_consecutive(marked, dim=0, return_counts=True)[1]
    if counts is None or len(counts) == len(batch):
        logits, _ = model(torch.cat([prompts, fed], 1), torch.cat([prompt_mask, fed_mask], 1))
        return logits[:, prompts.shape[1] - 1 :]
    first = counts.cumsum(0) - counts
    first_token, cache = prompts_fed_once(model, prompts[first], prompt_mask[first], counts)
    if longest == 1:
        return first_token
    return torch.cat([first_token, _completions_fed(model, fed, fed_mask, cache, lengths - 1)], 1)


def _packed_completion_logits(
    model: SequenceModel, batch: CompletionBatch, lengths: torch.Tensor, longest: int, budget: int
) -> torch.Tensor:
    """``completion_logits`` from one pass over each completion's real tokens (its prompt's, then
    its own but the last) packed into rows of ``budget`` tokens (``storage.packing``); zeros past
    a completion's end. Each rank runs one pass whatever it holds (a sharded model's passes are
    collectives)."""
    prompt_mask = batch.attention_mask[:, : -batch.new_tokens]
    prompt_lengths = prompt_mask.sum(1)
    fed = [
        torch.cat([row[: -batch.new_tokens][real], row[-batch.new_tokens :][: max(int(length) - 1, 0)]])
        for row, real, length in zip(batch.sequences, prompt_mask, lengths, strict=True)
    ]
    packed = pack_sequences(fed, budget, filler=0, device=batch.sequences.device)
    logits, _ = model(packed.tokens, packed.tokens.new_ones(packed.tokens.shape, dtype=torch.bool),
                      packed_positions=packed.positions)  # fmt: skip
    steps = torch.arange(longest, device=lengths.device)
    read = packed.starts[:, None] + (prompt_lengths - 1)[:, None] + steps  # predicts completion token j
    past_end = steps >= lengths[:, None]
    flat = logits.reshape(-1, logits.shape[-1])
    return flat[read.masked_fill(past_end, 0)].masked_fill(past_end[..., None], 0.0)


def _completions_fed(
    model: SequenceModel,
    tokens: torch.Tensor,
    mask: torch.Tensor,
    cache: KVCache | PretrainedCache,
    read: torch.Tensor,
) -> torch.Tensor:
    """The logits of ``tokens`` ``[rows, width]`` after ``cache``, of which row i's first
    ``read[i]`` are used (the rest are whatever was fed there, or zeros where nothing was). The
    columns up to a split are fed for every row and the rest only for the rows that read past it
    (causal attention: nothing earlier depends on them), at the split that feeds fewest tokens,
    if it saves at least a quarter (a second pass has its own cost)."""
    rows, width = tokens.shape
    splits = torch.arange(1, width, device=read.device)
    fed_with_split = rows * splits + (read[:, None] > splits).sum(0) * (width - splits)
    if width < 2 or int(fed_with_split.min()) > 0.75 * rows * width:
        return model(tokens, mask, cache)[0]
    split = int(splits[fed_with_split.argmin()])
    head, cache = model(tokens[:, :split], mask[:, :split], cache)
    longer = (read > split).nonzero().squeeze(1)
    tail, _ = model(tokens[longer, split:], mask[longer, split:], cache.select_rows(longer))
    tail = head.new_zeros(rows, width - split, head.shape[-1]).index_copy(0, longer, tail)
    return torch.cat([head, tail], 1)


def token_log_probs(
    model: SequenceModel,
    batch: CompletionBatch,
    temperature: float,
    pad_id: int,
    autocast: torch.dtype | None = None,
    packed_tokens: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of the completion tokens and the entropies of the distributions they
    were drawn from (``[completions, new_tokens]`` each, 0 after a completion's end), at the
    sampling temperature, padding never among the choices (as in ``models.generate``);
    ``packed_tokens``: ``completion_logits``'."""
    with precision.autocast(batch.sequences.device, autocast):
        predicting = completion_logits(model, batch, packed_tokens)
    log_softmax = policy_log_softmax(predicting, temperature, pad_id)
    longest = log_softmax.shape[1]
    completion = batch.sequences[:, -batch.new_tokens :][:, :longest]
    real = batch.completion_mask[:, :longest]
    log_probs, entropy = chosen_log_probs_and_entropy(log_softmax, completion, real)
    past_longest = (0, batch.new_tokens - longest)
    return F.pad(log_probs, past_longest), F.pad(entropy, past_longest)


class GRPO:
    def __init__(
        self,
        policy: SequenceModel,
        cfg: GRPOConfig,
        pad_id: int,
        gradient_sync: GradientSync | None = None,
        clock: PhaseClock | None = None,
        autocast: torch.dtype | None = None,
        accumulation_steps: int = 1,
        optimizer_offload: bool = False,
        hold_unsharded_gradients: bool = False,
        reference: SequenceModel | None = None,
    ) -> None:
        """``reference``: the frozen initial policy the KL penalty keeps close to (made by the
        caller, before sharding), with ``kl_coef`` > 0.
        ``pad_id``: the padding token, never a choice of the policy; ``autocast``: the dtype the
        transformer runs its forward passes in (mixed precision);
        ``accumulation_steps``: micro-batches per minibatch (``train.gradient_accumulation_steps``);
        ``optimizer_offload``: the optimiser's state in CPU memory (``offload``);
        ``hold_unsharded_gradients``: a sharded policy's gradients reduced once a step, not once a
        micro-batch (``comm.sharded.ShardedGradients``)."""
        self.pad_id = pad_id
        self.accumulation_steps = accumulation_steps
        self.policy = policy
        self.reference = reference
        self.cfg = cfg
        self.gradient_sync = gradient_sync
        self.autocast = autocast
        self.clock = clock or PhaseClock()
        self.entropy_coef = cfg.entropy_coef
        """The entropy bonus's weight in the next update (``entropy_coefficient`` may raise it)."""
        params = list(policy.parameters())
        self.grads = gradients_for(params, self.clock, policy if hold_unsharded_gradients else None)
        self.optimizer = optimizer_for(
            params,
            lambda weights: torch.optim.AdamW(
                weights, lr=cfg.learning_rate, eps=cfg.adam_eps, weight_decay=cfg.weight_decay, fused=True
            ),
            optimizer_offload,
        )

    def set_learning_rate(self, lr: float) -> None:
        set_learning_rate([self.optimizer], lr)

    def log_probs(self, model: SequenceModel, batch: CompletionBatch) -> torch.Tensor:
        """``model``'s log-probabilities of the completions, without gradients."""
        return self.log_probs_and_entropy(model, batch)[0]

    def log_probs_and_entropy(
        self, model: SequenceModel, batch: CompletionBatch
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``log_probs`` and the per-token entropies of the same forward pass."""
        cfg = self.cfg
        with torch.no_grad():
            return token_log_probs(
                model, batch, cfg.temperature, self.pad_id, self.autocast, cfg.sequence_packing_tokens
            )

    def prepare(
        self, batch: CompletionBatch, entropy: torch.Tensor | None, generated_ahead: bool, age: int
    ) -> tuple[torch.Tensor | None, dict[str, float]]:
        """The passes over the step's batch before its update, each filling a field of ``batch``:
        the policy's own log-probabilities, the ratios' old ones, where generation's cannot serve
        (taken in low precision, or ``generated_ahead`` by weights ``age`` updates old: then
        corrected, ``correct_for_lag``), and the reference policy's for the KL penalty. Returns
        the sampling entropies (taken again with the log-probabilities) and the correction's
        figures."""
        generation_log_probs = None
        if generated_ahead and len(batch):
            generation_log_probs, batch.old_log_probs = batch.old_log_probs, None
        if batch.old_log_probs is None:
            # In low precision, generation's one-token steps and the loss's passes round apart:
            # the ratios compare with log-probabilities from a pass like the loss's own.
            with self.clock("log_probs"):
                batch.old_log_probs, entropy = self.log_probs_and_entropy(self.policy, batch)
        corrected = self.correct_for_lag(batch, generation_log_probs, age) if generated_ahead else {}
        if self.reference is not None:
            with self.clock("log_probs"):
                batch.reference_log_probs = self.log_probs(self.reference, batch)
        return entropy, corrected

    def correct_for_lag(
        self, batch: CompletionBatch, generation_log_probs: torch.Tensor | None, age: int
    ) -> dict[str, float]:
        """A batch generated ahead of training (``collect.lag``), its ``old_log_probs`` the
        learner's own: how far generation's log-probabilities are from them (mean absolute
        difference per token; 0 on a rank training on none), and, for a batch ``age`` > 0 updates
        old, the truncated importance weights pi_old / mu (at most ``importance_sampling_cap``)
        that the loss multiplies the surrogate by, with ``importance_sampling_correction``."""
        if generation_log_probs is None:
            return {"generation_log_prob_mismatch": 0.0, "importance_weight_mean": 1.0}
        assert batch.old_log_probs is not None
        mask = batch.completion_mask.to(generation_log_probs.dtype)
        log_ratio = batch.old_log_probs - generation_log_probs
        weights = log_ratio.exp().clamp(max=self.cfg.importance_sampling_cap)
        if age > 0 and self.cfg.importance_sampling_correction:
            batch.importance_weights = weights
        tokens = mask.sum()
        return {
            "generation_log_prob_mismatch": float((log_ratio.abs() * mask).sum() / tokens),
            "importance_weight_mean": float((weights * mask).sum() / tokens),
        }

    def update(self, batch: CompletionBatch, plan: Sequence[Sequence[torch.Tensor]]) -> dict[str, float]:
        """One optimiser step per minibatch of ``plan`` (per epoch, the local rows of each global
        minibatch; a rank with none joins the step with an empty batch, at weight 0); mean
        statistics."""
        totals: dict[str, float] = {}
        steps = 0
        for epoch in plan:
            for rows in epoch:
                stats = self.minibatch_step(batch.rows(rows))
                for key, value in stats.items():
                    totals[key] = totals.get(key, 0.0) + value
                steps += 1
        skipped = totals.pop("skipped_minibatches", 0.0)
        # Every rank reports every statistic, 0 where it trained on nothing (dynamic sampling can
        # leave a rank, or the whole step, without prompts): ranks average them in one collective.
        names = ("loss", "entropy", "approx_kl", "clip_fraction", "grad_norm")
        names += ("kl",) if self.cfg.kl_coef > 0.0 else ()
        return {"skipped_minibatches": skipped, **{k: totals.get(k, 0.0) / max(steps, 1) for k in names}}

    def minibatch_step(self, mb: CompletionBatch) -> dict[str, float]:
        """One optimiser step on ``mb``, through ``micro_batches`` parts whose gradients add up to
        the whole one's (gradient accumulation); statistics are means weighted like the loss.
        Every part runs, empty ones too (at weight 0), so every rank runs the same passes (a
        sharded learner's passes are collectives)."""
        sums: dict[str, float] = {}
        weights = 0.0

        def part_loss(rows: torch.Tensor) -> tuple[torch.Tensor, float]:
            nonlocal weights
            with self.clock("forward"):
                loss, weight, terms = self.loss(mb.rows(rows))
            if weight:  # an empty part's terms are 0/0
                for key, value in terms.items():
                    sums[key] = sums.get(key, 0.0) + float(value) * weight
            weights += weight
            return loss, weight

        parts = torch.arange(len(mb), device=mb.sequences.device).tensor_split(self.accumulation_steps)
        grad_norm = self.grads.accumulated_step(
            [functools.partial(part_loss, rows) for rows in parts],
            self.optimizer,
            self.gradient_sync,
            self.cfg.max_grad_norm,
        )
        stats = {key: value / weights for key, value in sums.items()}
        return {**stats, "grad_norm": grad_norm, "skipped_minibatches": float(math.isnan(grad_norm))}

    def loss(self, mb: CompletionBatch) -> tuple[torch.Tensor, float, dict[str, torch.Tensor]]:
        """The clipped surrogate (plus the KL penalty) normalised over this rank's tokens or
        completions, that count (the gradient's weight in the cross-rank mean), and detached
        statistics (token means)."""
        cfg = self.cfg
        log_probs, entropy = token_log_probs(
            self.policy, mb, cfg.temperature, self.pad_id, self.autocast, cfg.sequence_packing_tokens
        )
        mask = mb.completion_mask.to(log_probs.dtype)
        log_ratio = log_probs - mb.old_log_probs
        ratio = log_ratio.exp()
        advantages = mb.advantages[:, None]
        clipped_ratio = ratio.clamp(1.0 - cfg.ratio_clip_min, 1.0 + cfg.ratio_clip_max)
        surrogate = -torch.min(ratio * advantages, clipped_ratio * advantages)
        if mb.importance_weights is not None:  # generated by older weights: corrected towards pi_old
            surrogate = surrogate * mb.importance_weights
        per_token = surrogate - self.entropy_coef * entropy
        terms: dict[str, torch.Tensor] = {}
        tokens = mask.sum()
        if cfg.kl_coef > 0.0:
            kl = kl_estimate(log_probs, mb.reference_log_probs, cfg)
            per_token = per_token + cfg.kl_coef * kl
            terms["kl"] = ((kl * mask).sum() / tokens).detach()
        if cfg.loss_normalization == "token":
            loss, weight = (per_token * mask).sum() / tokens, float(tokens)
        else:
            loss, weight = ((per_token * mask).sum(1) / mask.sum(1)).mean(), float(len(mb))
        with torch.no_grad():
            outside = (ratio < 1.0 - cfg.ratio_clip_min) | (ratio > 1.0 + cfg.ratio_clip_max)
            terms.update(
                loss=loss.detach(),
                entropy=(entropy * mask).sum() / tokens,
                approx_kl=(((ratio - 1.0) - log_ratio) * mask).sum() / tokens,
                clip_fraction=(outside.to(mask.dtype) * mask).sum() / tokens,
            )
        return loss, weight, terms
