"""Causal LMs of Hugging Face architectures (Llama, Qwen2, GPT-2) built from a config in code with
random weights, and a BPE tokenizer trained on local text: a ``model.transformer.pretrained``
directory made without any download (the ``transformers`` extra)."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from distrl import extras
from distrl.extras import require_extra

ARCHITECTURES = ("llama", "qwen2", "gpt2")


@dataclass(frozen=True)
class LMShape:
    width: int
    layers: int
    heads: int
    kv_heads: int
    """Key/value heads (grouped-query attention: fewer than ``heads``; GPT-2 has as many)."""
    context: int
    mlp_width: int


def causal_lm_config(architecture: str, shape: LMShape, vocab_size: int, eos_id: int, pad_id: int) -> Any:  # noqa: ANN401
    """The ``transformers`` config of ``architecture`` at ``shape``."""
    import transformers

    ids = {"vocab_size": vocab_size, "eos_token_id": eos_id, "pad_token_id": pad_id, "bos_token_id": eos_id}
    if architecture == "gpt2":
        return transformers.GPT2Config(
            n_embd=shape.width, n_layer=shape.layers, n_head=shape.heads, n_positions=shape.context,
            n_inner=shape.mlp_width, **ids,
        )  # fmt: skip
    config_class = {"llama": transformers.LlamaConfig, "qwen2": transformers.Qwen2Config}[architecture]
    return config_class(
        hidden_size=shape.width, num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads, intermediate_size=shape.mlp_width,
        max_position_embeddings=shape.context, tie_word_embeddings=False, **ids,
    )  # fmt: skip


def write_local_lm(
    directory: Path,
    architecture: str,
    shape: LMShape,
    tokenizer: Any,
    seed: int = 0,  # noqa: ANN401
) -> int:
    """Save a randomly initialised causal LM of ``architecture`` with ``tokenizer`` (a
    ``transformers`` tokenizer) to ``directory``; return its number of parameters."""
    require_extra(*extras.TRANSFORMERS)
    import transformers

    config = causal_lm_config(
        architecture, shape, len(tokenizer), tokenizer.eos_token_id, tokenizer.pad_token_id
    )
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return sum(p.numel() for p in model.parameters())


def bpe_tokenizer(texts: Iterable[str], vocab_size: int) -> Any:  # noqa: ANN401
    """A byte-level BPE tokenizer of ``vocab_size`` tokens trained on ``texts`` (``tokenizers``),
    with ``<eos>`` and ``<pad>`` tokens, as a ``transformers`` tokenizer."""
    require_extra(*extras.TRANSFORMERS)
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<eos>", "<pad>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<eos>", pad_token="<pad>")


def synthetic_text(lines: int, seed: int = 0) -> list[str]:
    """Lines of made-up words (syllables drawn at random) and numbers: enough distinct pieces to
    train a BPE vocabulary of tens of thousands of tokens, made in code."""
    rng = random.Random(seed)
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in ("a", "e", "i", "o", "u", "ai", "ou", "ee")]
    words = ["".join(rng.choices(syllables, k=rng.randint(1, 4))) for _ in range(60_000)]
    return [
        " ".join(rng.choice(words) if rng.random() < 0.9 else str(rng.randint(0, 99_999)) for _ in range(12))
        for _ in range(lines)
    ]
