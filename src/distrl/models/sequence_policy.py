"""A sequence policy as a deployable whole: the transformer with its tokenizer, completing text
prompts greedily. What GRPO's evaluation, ``distrl eval`` and eval workers act with."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

from distrl.io.train_state import SavedState
from distrl.learner_memory import LearnerParameters
from distrl.models.generate import generate, left_padded
from distrl.models.pretrained import (
    PretrainedTokenizer,
    load_pretrained_model,
    load_pretrained_tokenizer,
    pretrained_context,
    pretrained_on_meta,
)
from distrl.models.sequence_model import SequenceModel
from distrl.models.transformer import TransformerLM
from distrl.precision import low_precision
from distrl.tasks.prompts import task_tokenizer
from distrl.tasks.tokenizer import CharTokenizer

if TYPE_CHECKING:
    from distrl.config.run import RunConfig


Tokenizer = CharTokenizer | PretrainedTokenizer


class SequencePolicy(nn.Module):
    def __init__(self, model: SequenceModel, tokenizer: Tokenizer, max_new_tokens: int) -> None:
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.max_new_tokens = max_new_tokens

    def complete(self, prompts: Sequence[str]) -> tuple[list[str], list[bool]]:
        """Each prompt's greedy completion (the text before the end token) and whether it ended."""
        device = next(self.model.parameters()).device
        rows = [self.tokenizer.encode(prompt, "prompt") for prompt in prompts]
        tokens, mask = left_padded(rows, self.tokenizer.pad_id, device)
        done = generate(
            self.model, tokens, mask, self.max_new_tokens, self.tokenizer.eos_id, self.tokenizer.pad_id
        )
        texts = [self.tokenizer.decode(row) for row in done.tokens.tolist()]
        return texts, done.ended.tolist()

    def forward(self, prompts: torch.Tensor, prompt_mask: torch.Tensor) -> torch.Tensor:
        """Greedy completion token ids of left-padded prompt ids."""
        tok = self.tokenizer
        return generate(self.model, prompts, prompt_mask, self.max_new_tokens, tok.eos_id, tok.pad_id).tokens


def sequence_policy(cfg: RunConfig, saved: SavedState) -> nn.Module:
    """GRPO's deployable policy from a checkpoint (the algorithm registry's ``deployable_policy``)."""
    tokenizer = sequence_tokenizer(cfg)
    model = sequence_model(cfg, tokenizer)
    model.load_state_dict(saved.module_tensors("policy"))
    return SequencePolicy(model, tokenizer, cfg.algo.max_new_tokens)


def sequence_tokenizer(cfg: RunConfig) -> Tokenizer:
    """The pretrained model's tokenizer, or the task's character tokenizer."""
    pretrained = cfg.model.transformer.pretrained
    return load_pretrained_tokenizer(pretrained) if pretrained else task_tokenizer(cfg.task)


def sequence_model(cfg: RunConfig, tokenizer: Tokenizer) -> SequenceModel:
    """The pretrained model, or distrl's transformer built from random weights.

    Turns torch's cuDNN attention off for the process: it builds a plan for each new shape
    (hundreds of ms), and a sequence policy's shapes change with every decoding step and batch
    (GRPO on an H200 in bf16 generated 13x fewer tokens per second with it, BENCHMARKS.md). Off
    for the process, not around each call, so that activation checkpointing recomputes with the
    backend the forward pass used."""
    torch.backends.cuda.enable_cudnn_sdp(False)
    pretrained = cfg.model.transformer.pretrained
    return (
        load_pretrained_model(pretrained)
        if pretrained
        else TransformerLM(tokenizer.vocab_size, cfg.model.transformer)
    )


def sequence_model_parameters(cfg: RunConfig) -> LearnerParameters:
    """The parameters of the config's sequence model (and of its KL reference, a frozen copy),
    counted on the meta device: no weights are made or read. A sharded learner gathers them in
    the dtype of its ``train.mixed_precision`` (``auto``: as this machine decides it)."""
    pretrained = cfg.model.transformer.pretrained
    with torch.device("meta"):
        model = (
            pretrained_on_meta(pretrained)
            if pretrained
            else TransformerLM(task_tokenizer(cfg.task).vocab_size, cfg.model.transformer)
        )
    trained = sum(p.numel() for p in model.parameters())
    device = torch.device("cuda" if torch.cuda.is_available() and cfg.train.device != "cpu" else "cpu")
    gathered = low_precision(cfg.train.mixed_precision, device, heavy_model=True) or torch.float32
    frozen = trained if cfg.algo.kl_coef > 0 else 0
    return LearnerParameters(trained, frozen, gathered.itemsize, gathered_frozen=True)


def sequence_context(cfg: RunConfig) -> tuple[int, str]:
    """The positions the model reads, and the setting that says so (for messages)."""
    pretrained = cfg.model.transformer.pretrained
    if pretrained:
        return pretrained_context(pretrained), f"the {pretrained} model's"
    return cfg.model.transformer.context, "model.transformer.context="
