"""A local Hugging Face causal LM and its tokenizer as the sequence policy
(``model.transformer.pretrained``, the ``transformers`` extra): loaded offline from a directory
written by ``save_pretrained``, behind the interface of distrl's own transformer
(``models.transformer``: ``forward(tokens, attention_mask, cache) -> (logits, cache)`` on
left-padded rows) and of its character tokenizer (``encode``, ``decode``, ``pad_id``, ``eos_id``),
so generation, the GRPO loss, checkpoints and evaluation take it unchanged."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from distrl import extras
from distrl.errors import UserError
from distrl.extras import require_extra
from distrl.models.transformer import repeat_rows
from distrl.tasks.tokenizer import text_ids


class PretrainedTokenizer:
    """A ``transformers`` tokenizer as distrl's tokenizers are used: no special tokens added to
    prompts, decoding up to the first end token."""

    def __init__(self, tokenizer: Any, where: str) -> None:
        self.tokenizer = tokenizer
        self.pad_id, self.eos_id = tokenizer.pad_token_id, tokenizer.eos_token_id
        if self.eos_id is None or self.pad_id is None or self.pad_id == self.eos_id:
            raise UserError(
                f"{where}: the tokenizer needs an end token and a padding token apart from it (pad "
                f"{tokenizer.pad_token!r}, end {tokenizer.eos_token!r}); add one with "
                "tokenizer.add_special_tokens({'pad_token': '<pad>'}), resize the model's embeddings, "
                "and save both again",
                code="model-tokenizer-pad-token",
            )
        self.vocab_size = len(tokenizer)

    def encode(self, text: str, where: str) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=False)
        unknown = self.tokenizer.unk_token_id
        if unknown is not None and unknown in ids:
            raise UserError(
                f"{where}: {text!r} has characters the tokenizer does not know",
                code="model-tokenizer-unknown-characters",
            )
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """The text before the first end token (padding skipped)."""
        return self.tokenizer.decode(text_ids(ids, self.eos_id, self.pad_id))


@dataclass
class PretrainedCache:
    """The model's own key-value cache and the attention mask over the positions fed so far."""

    past: Any
    mask: torch.Tensor

    def repeat_rows(self, copies: int | torch.Tensor) -> PretrainedCache:
        """As ``KVCache.repeat_rows``; transformers repeats its cache in place, so this one is
        spent."""
        self.past.batch_repeat_interleave(copies)
        return PretrainedCache(self.past, repeat_rows(self.mask, copies))

    def select_rows(self, index: torch.Tensor) -> PretrainedCache:
        """As ``KVCache.select_rows``; spent like ``repeat_rows``."""
        self.past.batch_select_indices(index)
        return PretrainedCache(self.past, self.mask[index])


class PretrainedLM(nn.Module):
    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.context = _positions(model.config)
        self.vocab_size = model.get_output_embeddings().out_features
        # Dropout off, as RL fine-tuning has it: the loss must score completions with the
        # probabilities they were sampled with (the first step's ratio is then exactly 1).
        for module in model.modules():
            if isinstance(module, nn.Dropout):
                module.p = 0.0
        self.repeatable_cache = _plain_key_value_cache(model.config)
        """Every layer caches keys and values only, which copy and select row by row; a
        recurrent or linear-attention state, a static or quantized layer, would not."""

    @property
    def activation_checkpointing(self) -> bool:
        return self.model.is_activation_checkpointing

    @activation_checkpointing.setter
    def activation_checkpointing(self, enabled: bool) -> None:
        """``train.activation_checkpointing``: the model's own activation checkpointing."""
        if enabled:
            self.model.activation_checkpointing_enable({"use_reentrant": False})
        else:
            self.model.activation_checkpointing_disable()

    def forward(
        self,
        tokens: torch.Tensor,
        attention_mask: torch.Tensor,
        cache: PretrainedCache | None = None,
        packed_positions: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, PretrainedCache]:
        """As ``TransformerLM.forward``: positions count real tokens only (left padding)."""
        if packed_positions is not None:
            # Without a mask, transformers reads the sequences from positions restarting at 0.
            out = self.model(input_ids=tokens, position_ids=packed_positions, use_cache=False)
            return out.logits, PretrainedCache(None, attention_mask)
        past_mask = cache.mask if cache is not None else attention_mask[:, :0]
        mask = torch.cat([past_mask, attention_mask], dim=1)
        positions = (mask.long().cumsum(1) - 1).clamp(min=0)[:, past_mask.shape[1] :]
        out = self.model(
            input_ids=tokens,
            attention_mask=mask.long(),
            position_ids=positions,
            cache=cache.past if cache is not None else None,
            use_cache=not (self.activation_checkpointing and torch.is_grad_enabled()),
        )
        return out.logits, PretrainedCache(out.cache, mask)


def _plain_key_value_cache(config: Any) -> bool:  # noqa: ANN401 (transformers is an optional extra)
    from transformers.cache_utils import DynamicCache, DynamicLayer, DynamicSlidingWindowLayer

    plain = (DynamicLayer, DynamicSlidingWindowLayer)
    return all(type(layer) in plain for layer in DynamicCache(config=config).layers)


def load_pretrained_tokenizer(path: str) -> PretrainedTokenizer:
    from transformers import AutoTokenizer

    return PretrainedTokenizer(_loaded(AutoTokenizer, path, "tokenizer"), _where(path))


def load_pretrained_model(path: str) -> PretrainedLM:
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging

    logging.disable_progress_bar()
    return PretrainedLM(_loaded(AutoModelForCausalLM, path, "causal LM", dtype=torch.float32))


def pretrained_on_meta(path: str) -> nn.Module:
    """The causal LM of ``path`` built from its config alone, its weights neither made nor read
    (call on the meta device)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    return AutoModelForCausalLM.from_config(_loaded(AutoConfig, path, "model config"))


def pretrained_context(path: str) -> int:
    """The positions the model reads, from its config alone."""
    from transformers import AutoConfig

    return _positions(_loaded(AutoConfig, path, "model config"))


def _loaded(auto_class: Any, path: str, what: str, **kwargs: Any) -> Any:
    """``auto_class.from_pretrained(path)`` offline; one line naming ``what`` when it fails."""
    where = _checked_directory(path)
    try:
        return auto_class.from_pretrained(path, local_files_only=True, **kwargs)
    except (OSError, ValueError) as exc:
        raise UserError(
            f"{where}: no {what} could be loaded: {str(exc).splitlines()[0]}",
            code="model-pretrained-unloadable",
        ) from None


def _positions(config: Any) -> int:
    return getattr(config, "n_positions", None) or config.max_position_embeddings


def _where(path: str) -> str:
    """``model.transformer.pretrained`` as messages name it."""
    return f"model.transformer.pretrained {path}"


def _checked_directory(path: str) -> str:
    """``_where(path)``, after checking it is a directory."""
    require_extra(*extras.PRETRAINED)
    where = _where(path)
    if not Path(path).is_dir():
        raise UserError(
            f"{where}: not a directory; give one written by save_pretrained",
            code="model-pretrained-not-directory",
        )
    return where
