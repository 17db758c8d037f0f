"""A small decoder-only transformer for sequence policies (GRPO), laid out as GPT-2 is: learned
token and position embeddings, pre-norm blocks of causal self-attention and a 4x MLP with tanh
GELU, a final LayerNorm and an output layer tied to the token embedding. Matching GPT-2 exactly is
what lets the model be written out as a ``transformers`` GPT-2 model.

Rows may be left-padded: ``attention_mask`` marks real tokens, positions count real tokens only,
and no token attends to padding, so a row's numbers do not depend on how much padding its batch
needed. ``KVCache`` keeps every layer's keys and values, so decoding feeds one new token per step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from distrl.algos.grpo_config import TransformerConfig


@dataclass
class KVCache:
    """Keys and values of every layer for the positions fed so far, ``[batch, heads, length,
    head_size]`` each, and the attention mask over those positions."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    mask: torch.Tensor
    """``[batch, length]``: True where the position holds a real token."""

    @property
    def length(self) -> int:
        return self.mask.shape[1]

    def repeat_rows(self, copies: int | torch.Tensor) -> KVCache:
        """Each row ``copies`` times over (one count for all, or one per row), copies side by
        side: completions of one prompt share what its prompt computed."""
        return KVCache(
            [repeat_rows(k, copies) for k in self.keys],
            [repeat_rows(v, copies) for v in self.values],
            repeat_rows(self.mask, copies),
        )

    def select_rows(self, index: torch.Tensor) -> KVCache:
        """The rows ``index`` names: completions still being generated, or still to be fed."""
        return KVCache([k[index] for k in self.keys], [v[index] for v in self.values], self.mask[index])


def repeat_rows(tensor: torch.Tensor, copies: int | torch.Tensor) -> torch.Tensor:
    """``tensor.repeat_interleave(copies, 0)``; where every row has the same count, as an expanded
    view copied once, whose backward pass is a sum over the copies rather than a scatter-add."""
    one_per_row = isinstance(copies, torch.Tensor) and copies.shape == tensor.shape[:1]
    if one_per_row and len(copies) and bool((copies == copies[0]).all()):
        copies = int(copies[0])
    if isinstance(copies, torch.Tensor):
        return tensor.repeat_interleave(copies, 0)
    return tensor.unsqueeze(1).expand(-1, copies, *tensor.shape[1:]).reshape(-1, *tensor.shape[1:])


class SelfAttention(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.out = nn.Linear(width, width)

    def forward(
        self, x: torch.Tensor, allowed: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        """``allowed``: ``[batch, 1, queries, keys]``, which keys each query may attend to."""
        batch, length, width = x.shape
        q, k, v = (
            t.view(batch, length, self.heads, width // self.heads).transpose(1, 2)
            for t in self.qkv(x).split(width, dim=-1)
        )
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        if length == 1 and x.device.type == "cpu" and not torch.is_grad_enabled():
            y = one_query_attention(q, k, v, allowed)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        return self.out(y.transpose(1, 2).reshape(batch, length, width)), (k, v)


def one_query_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, allowed: torch.Tensor
) -> torch.Tensor:
    """``F.scaled_dot_product_attention`` for one query a row (a decoding step) on a CPU, where
    torch's own kernel costs most for what it computes (generation on the addition config: 1.07x
    the tokens/s, BENCHMARKS.md). The weights are summed over the values elementwise up to 16
    keys, where a batched matrix product of a row by a few keys costs more."""
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    weights = normalised(scores.masked_fill(~allowed, -torch.inf))
    if k.shape[2] <= 16:
        return (weights.transpose(-1, -2) * v).sum(-2, keepdim=True)
    return weights @ v


def normalised(scores: torch.Tensor, log: bool = False) -> torch.Tensor:
    """``scores.softmax(-1)``, or ``log_softmax`` with ``log``, at its fastest on a CPU."""
    width = scores.shape[-1]
    if scores.device.type == "cpu" and width < 16:
        # torch's CPU (log_)softmax over fewer than 16 choices is 4-8x slower than over 16 (torch
        # 2.13): a short last axis is widened with impossible choices and cut back.
        widened = F.pad(scores, (0, 16 - width), value=-torch.inf)
        return (widened.log_softmax(-1) if log else widened.softmax(-1))[..., :width]
    return scores.log_softmax(-1) if log else scores.softmax(-1)


class Block(nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.attention_norm = nn.LayerNorm(width)
        self.attention = SelfAttention(width, heads)
        self.mlp_norm = nn.LayerNorm(width)
        self.mlp = nn.Sequential(
            nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"), nn.Linear(4 * width, width)
        )

    def forward(
        self, x: torch.Tensor, allowed: torch.Tensor, past: tuple[torch.Tensor, torch.Tensor] | None = None
    ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
        attended, present = self.attention(self.attention_norm(x), allowed, past)
        x = x + attended
        return x + self.mlp(self.mlp_norm(x)), present


class TransformerLM(nn.Module):
    def __init__(self, vocab_size: int, cfg: TransformerConfig) -> None:
        super().__init__()
        self.context = cfg.context
        self.vocab_size = vocab_size
        self.token_embedding = nn.Embedding(vocab_size, cfg.width)
        self.position_embedding = nn.Embedding(cfg.context, cfg.width)
        self.blocks = nn.ModuleList(Block(cfg.width, cfg.heads) for _ in range(cfg.layers))
        self.final_norm = nn.LayerNorm(cfg.width)
        self.activation_checkpointing = False
        """Recompute each block's activations in the backward pass instead of keeping them
        (``train.activation_checkpointing``): less memory for more compute."""
        self.repeatable_cache = True
        """Its cache can be copied and selected row by row (``KVCache.repeat_rows``,
        ``select_rows``): a prompt fed once serves each of its completions, and a finished one
        leaves the batch."""
        self.apply(_init_like_gpt2)

    def forward(
        self,
        tokens: torch.Tensor,
        attention_mask: torch.Tensor,
        cache: KVCache | None = None,
        packed_positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, KVCache]:
        """Logits ``[batch, length, vocab]`` for ``tokens`` ``[batch, length]`` (following the
        cached positions, if any), and the cache extended by them. ``packed_positions``: rows
        that each hold several sequences one after another (sequence packing, no cache), each
        token's position in its own sequence, 0 where one begins: a token attends only to its own
        sequence's tokens before it."""
        if packed_positions is not None:
            x = self.token_embedding(tokens) + self.position_embedding(packed_positions)
            mask = attention_mask
            allowed = _allowed_in_sequence(packed_positions)
        else:
            past_mask = cache.mask if cache is not None else attention_mask[:, :0]
            mask = torch.cat([past_mask, attention_mask], dim=1)
            positions = (mask.long().cumsum(1) - 1).clamp(min=0)[:, past_mask.shape[1] :]
            x = self.token_embedding(tokens) + self.position_embedding(positions)
            allowed = _allowed_keys(mask, tokens.shape[1])
        keys, values = [], []
        for index, block in enumerate(self.blocks):
            past = (cache.keys[index], cache.values[index]) if cache is not None else None
            if self.activation_checkpointing and torch.is_grad_enabled():
                x, (k, v) = checkpoint(block, x, allowed, past, use_reentrant=False)
            else:
                x, (k, v) = block(x, allowed, past)
            keys.append(k)
            values.append(v)
        logits = F.linear(self.final_norm(x), self.token_embedding.weight)
        return logits, KVCache(keys, values, mask)


def _allowed_keys(mask: torch.Tensor, queries: int) -> torch.Tensor:
    """``[batch, 1, queries, keys]``: the last ``queries`` positions of ``mask`` attend to real
    tokens at or before themselves, and always to themselves (a padding position attends to
    nothing else, and a row of nothing would be NaN)."""
    keys = mask.shape[1]
    query_index = torch.arange(keys - queries, keys, device=mask.device)[:, None]
    key_index = torch.arange(keys, device=mask.device)[None, :]
    causal = key_index <= query_index
    return (causal & mask[:, None, None, :]) | (key_index == query_index)


def _allowed_in_sequence(positions: torch.Tensor) -> torch.Tensor:
    """``[batch, 1, length, length]``: each position of a packed row attends to those at or
    before it in the same sequence (a sequence begins at position 0)."""
    sequence = (positions == 0).cumsum(1)
    index = torch.arange(positions.shape[1], device=positions.device)
    causal = index[None, :] <= index[:, None]
    return (causal & (sequence[:, :, None] == sequence[:, None, :]))[:, None]


def _init_like_gpt2(module: nn.Module) -> None:
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, std=0.02)
    if isinstance(module, nn.Linear):
        nn.init.zeros_(module.bias)
