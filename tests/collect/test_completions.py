"""A step's completions generated in parts (as generation workers split a learner's prompts) and
joined are the completions of the whole batch: the same tokens, and the same log-probabilities up
to rounding."""

from __future__ import annotations

import torch

from distrl.collect.completions import generate_step, joined
from distrl.config.run import load_config
from distrl.models.sequence_policy import sequence_model, sequence_tokenizer
from distrl.tasks.prompts import PromptSource
from tests.helpers import REPO


def test_completions_generated_in_parts_and_joined_are_the_whole_batchs() -> None:
    cfg = load_config(REPO / "configs" / "grpo_reverse.yaml", ["task.min_length=1", "task.max_length=6"])
    tokenizer = sequence_tokenizer(cfg)
    torch.manual_seed(0)
    model = sequence_model(cfg, tokenizer).requires_grad_(False)
    indices = list(range(40, 48))
    source = PromptSource(cfg.task, cfg.train.seed, held_out_side=False)
    prompts = [e.prompt for e in source.examples(indices)]
    assert max(map(len, prompts[:3])) != max(map(len, prompts[3:]))  # the parts are padded apart

    def step(part: slice) -> object:
        cpu = torch.device("cpu")
        return generate_step(cfg, model, tokenizer, 7, indices[part], prompts[part], cpu, None, True)

    whole, parts = step(slice(None)), joined([step(slice(0, 3)), step(slice(3, 8))], tokenizer.pad_id)
    for name in ("prompts", "prompt_mask", "tokens", "mask", "ended"):
        assert torch.equal(getattr(parts, name), getattr(whole, name)), name
    torch.testing.assert_close(parts.log_probs, whole.log_probs, rtol=0, atol=1e-5)
    torch.testing.assert_close(parts.entropy, whole.entropy, rtol=0, atol=1e-5)
