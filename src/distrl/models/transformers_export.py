"""A sequence policy written out as a Hugging Face ``transformers`` model (the ``transformers``
extra): GPT-2, whose layout distrl's transformer has (``models.transformer``), with the character
tokenizer rebuilt in the ``tokenizers`` library. Users take it elsewhere with
``AutoModelForCausalLM.from_pretrained(DIR)`` and ``AutoTokenizer.from_pretrained(DIR)``; nothing
is downloaded.

GPT-2 keeps its linear layers as ``Conv1D``, weights stored input-major: each is the transpose of
the ``nn.Linear`` weight it comes from.
"""

from __future__ import annotations

from pathlib import Path

import gymnasium as gym
import torch

from distrl import extras
from distrl.errors import UserError
from distrl.extras import require_extra
from distrl.io.export import check_can_write_in
from distrl.models.pretrained import PretrainedLM
from distrl.models.sequence_policy import SequencePolicy
from distrl.models.transformer import TransformerLM
from distrl.tasks.tokenizer import CharTokenizer


def gpt2_tensors(model: TransformerLM) -> dict[str, torch.Tensor]:
    """``model``'s weights under GPT2LMHeadModel's names."""
    tensors = {
        "transformer.wte.weight": model.token_embedding.weight,
        "transformer.wpe.weight": model.position_embedding.weight,
        "transformer.ln_f.weight": model.final_norm.weight,
        "transformer.ln_f.bias": model.final_norm.bias,
        "lm_head.weight": model.token_embedding.weight,  # tied, as distrl's output layer is
    }
    for index, block in enumerate(model.blocks):
        layers = {
            "ln_1": block.attention_norm,
            "attn.c_attn": block.attention.qkv,
            "attn.c_proj": block.attention.out,
            "ln_2": block.mlp_norm,
            "mlp.c_fc": block.mlp[0],
            "mlp.c_proj": block.mlp[2],
        }
        for name, layer in layers.items():
            is_linear = isinstance(layer, torch.nn.Linear)
            tensors[f"transformer.h.{index}.{name}.weight"] = layer.weight.t() if is_linear else layer.weight
            tensors[f"transformer.h.{index}.{name}.bias"] = layer.bias
    return {name: tensor.detach().contiguous() for name, tensor in tensors.items()}


def check_can_export_transformers(fmt: str, out: Path, where: str) -> None:
    """Fail with one line, before any work, if the model directory cannot be written at ``out``
    (the registry's ``export_check`` of ``transformers``)."""
    require_extra(*extras.TRANSFORMERS)
    if out.exists() and not out.is_dir():
        raise UserError(
            f"{where} {out}: the {fmt} format is a directory; this is a file", code="export-out-is-file"
        )
    check_can_write_in(out, where)


def export_transformers(
    policy: SequencePolicy, observation_space: gym.Space, fmt: str, out: Path, where: str
) -> None:
    """The registry's writer of ``transformers``: ``save_as_transformers``; the prompt tokens'
    space, ``fmt`` and ``where`` tell it nothing more."""
    save_as_transformers(policy, out)


def save_as_transformers(policy: SequencePolicy, out: Path) -> None:
    """Write ``policy`` (model and tokenizer) to the directory ``out``: a pretrained model as its
    own kind, with its trained weights; distrl's transformer as GPT-2."""
    require_extra(*extras.TRANSFORMERS)
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging

    logging.disable_progress_bar()

    model, tokenizer = policy.model, policy.tokenizer
    if isinstance(model, PretrainedLM):
        model.model.save_pretrained(out)
        tokenizer.tokenizer.save_pretrained(out)
        return
    width = model.token_embedding.embedding_dim
    config = GPT2Config(
        vocab_size=tokenizer.vocab_size,
        n_positions=model.context,
        n_embd=width,
        n_layer=len(model.blocks),
        n_head=model.blocks[0].attention.heads,
        activation_function="gelu_new",  # GPT-2's tanh approximation, as distrl's
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=model.final_norm.eps,
        bos_token_id=tokenizer.eos_id,
        eos_token_id=tokenizer.eos_id,
        pad_token_id=tokenizer.pad_id,
        tie_word_embeddings=True,
    )
    hf_model = GPT2LMHeadModel(config)
    missing, unexpected = hf_model.load_state_dict(gpt2_tensors(model), strict=False)
    if unexpected or any(not name.endswith(".attn.bias") for name in missing):
        raise RuntimeError(f"GPT-2's layout changed: missing {missing}, unexpected {unexpected}")
    # distrl never generates padding (models.generate): nor does transformers' generate, by default.
    hf_model.generation_config.suppress_tokens = [tokenizer.pad_id]
    hf_model.save_pretrained(out)
    hf_tokenizer(tokenizer).save_pretrained(out)


def hf_tokenizer(tokenizer: CharTokenizer):  # noqa: ANN201 (transformers is an optional extra)
    """The character tokenizer as a ``PreTrainedTokenizerFast``: one token per character, padding
    on the left (as distrl's generation pads prompts)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate(tokenizer.tokens)}
    pad, eos = tokenizer.tokens[tokenizer.pad_id], tokenizer.tokens[tokenizer.eos_id]
    core = Tokenizer(models.WordLevel(vocab, unk_token=pad))
    core.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    core.decoder = decoders.Fuse()  # characters back together, with no spaces between
    core.add_special_tokens([pad, eos])
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token=pad, eos_token=eos, padding_side="left")
