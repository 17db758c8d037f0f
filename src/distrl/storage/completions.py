"""A batch of completions to learn from (GRPO): whole sequences, never split, with the numbers
the loss needs per token and per completion."""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch


@dataclass
class CompletionBatch:
    sequences: torch.Tensor
    """``[completions, prompt_length + new_tokens]``: the left-padded prompt, then the completion."""
    attention_mask: torch.Tensor
    """True on real tokens of ``sequences``."""
    completion_mask: torch.Tensor
    """``[completions, new_tokens]``: True on the completion's tokens (its end token included)."""
    advantages: torch.Tensor
    """``[completions]``: the completion's advantage within its group."""
    old_log_probs: torch.Tensor | None = None
    """``[completions, new_tokens]``: log-probabilities under the policy that generated them."""
    reference_log_probs: torch.Tensor | None = None
    """Likewise under the frozen reference policy (with a KL penalty)."""
    importance_weights: torch.Tensor | None = None
    """``[completions, new_tokens]``: asynchronous generation's truncated importance weights of
    each token's surrogate (``algo.importance_sampling_correction``); None: 1."""

    @property
    def new_tokens(self) -> int:
        return self.completion_mask.shape[1]

    def __len__(self) -> int:
        return self.sequences.shape[0]

    def rows(self, index: torch.Tensor) -> CompletionBatch:
        """The completions ``index`` selects."""
        picked = {f.name: getattr(self, f.name) for f in fields(self)}
        return CompletionBatch(**{name: None if t is None else t[index] for name, t in picked.items()})
