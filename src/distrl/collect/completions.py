"""Where a GRPO learner's completions come from: its own policy (``LocalGeneration``), or in Ray
mode its generation workers (``ray.generation_workers.RemoteGeneration``), which may run
``collect.lag`` steps ahead with older weights. Both hand the learner ``Generated``: the step's
completions, the examples they answer and the version of the weights that sampled them.

Whoever generates, a step's completions come from ``generate_step``: each prompt's noise is keyed
on the step and the prompt's global index, so a prompt's completions are the same in any batch,
process or split of the prompts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch

from distrl.models.generate import Completions, Sampling, generate, left_padded
from distrl.precision import autocast
from distrl.seeding import completion_seed
from distrl.tasks.prompts import Example
from distrl.timing import PhaseClock

if TYPE_CHECKING:
    from distrl.config.run import RunConfig
    from distrl.models.sequence_policy import SequenceModel, Tokenizer

StepPrompts = Callable[[int], tuple[list[int], list[Example]]]
"""A learner's prompts of a step: (their global indices, the examples)."""


@dataclass
class Generated:
    """A step's completions for one learner: G of each of its prompts, group after group."""

    completions: Completions
    examples: list[Example]
    """The prompts they answer, in order (their answers score them)."""
    indices: list[int]
    """The prompts' global indices (``tasks.prompts``), in the same order."""
    policy_version: int
    """The learner's updates (in this launch) whose weights sampled them."""


class CompletionSource(Protocol):
    def completions(self, step: int, policy_version: int) -> Generated:
        """Step ``step``'s completions; ``policy_version``: the learner's updates so far in this
        launch (the weights it would sample with now)."""
        ...


def generate_step(
    cfg: RunConfig,
    model: SequenceModel,
    tokenizer: Tokenizer,
    step: int,
    indices: list[int],
    prompts: list[str],
    device: torch.device,
    dtype: torch.dtype | None,
    keep_log_probs: bool,
    any_running: Callable[[int], bool] | None = None,
) -> Completions:
    """G sampled completions of each prompt, with the noise of its global index and the step
    (completion j its j-th draw), the prompt fed once for all G; run in ``dtype`` (autocast);
    ``any_running``: ``generate``'s, for ranks decoding in lockstep."""
    rows = [tokenizer.encode(prompt, "task prompt") for prompt in prompts]
    tokens, prompt_mask = left_padded(rows, tokenizer.pad_id, device)
    seeds = [completion_seed(cfg.train.seed, step, i) for i in indices]
    sampling = Sampling(cfg.algo.temperature, cfg.algo.top_k, cfg.algo.top_p)
    with autocast(device, dtype):
        return generate(
            model, tokens, prompt_mask, cfg.algo.max_new_tokens, tokenizer.eos_id, tokenizer.pad_id,
            sampling, seeds, copies=cfg.algo.num_generations_per_prompt, keep_log_probs=keep_log_probs,
            any_running=any_running,
        )  # fmt: skip


def joined(parts: list[Completions], pad_id: int) -> Completions:
    """Completions of consecutive prompts as one batch, the prompts left-padded to the longest."""
    if len(parts) == 1:
        return parts[0]
    width = max(part.prompts.shape[1] for part in parts)

    def left_pad(t: torch.Tensor, value: int | bool) -> torch.Tensor:
        return torch.nn.functional.pad(t, (width - t.shape[1], 0), value=value)

    def cat(name: str) -> torch.Tensor | None:
        tensors = [getattr(part, name) for part in parts]
        return None if tensors[0] is None else torch.cat(tensors)

    return Completions(
        prompts=torch.cat([left_pad(p.prompts, pad_id) for p in parts]),
        prompt_mask=torch.cat([left_pad(p.prompt_mask, False) for p in parts]),
        tokens=torch.cat([p.tokens for p in parts]),
        mask=torch.cat([p.mask for p in parts]),
        ended=torch.cat([p.ended for p in parts]),
        log_probs=cat("log_probs"),
        entropy=cat("entropy"),
    )


class LocalGeneration:
    """The learner's own policy generates each step's completions when it is asked for them."""

    def __init__(
        self,
        cfg: RunConfig,
        model: SequenceModel,
        tokenizer: Tokenizer,
        step_prompts: StepPrompts,
        device: torch.device,
        dtype: torch.dtype | None,
        clock: PhaseClock,
        any_running: Callable[[int], bool] | None = None,
    ) -> None:
        """``any_running``: ``generate``'s, for ranks decoding in lockstep (a sharded model)."""
        self.cfg, self.model, self.tokenizer = cfg, model, tokenizer
        self.step_prompts = step_prompts
        self.device, self.dtype, self.clock = device, dtype, clock
        self.any_running = any_running

    def completions(self, step: int, policy_version: int) -> Generated:
        indices, examples = self.step_prompts(step)
        with self.clock("generate"):
            # In low precision the loss's own pass gives the ratios' log-probabilities (GRPORunner).
            done = generate_step(
                self.cfg, self.model, self.tokenizer, step, indices, [e.prompt for e in examples],
                self.device, self.dtype, keep_log_probs=self.dtype is None, any_running=self.any_running,
            )  # fmt: skip
        return Generated(done, examples, indices, policy_version)
