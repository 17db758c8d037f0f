"""``SequenceModel``: the networks a sequence policy (GRPO) runs, distrl's own transformer or a
Hugging Face causal LM behind the same calls; apart, so that generation and the policy name it
without importing each other."""

from __future__ import annotations

from distrl.models.pretrained import PretrainedLM
from distrl.models.transformer import TransformerLM

SequenceModel = TransformerLM | PretrainedLM
