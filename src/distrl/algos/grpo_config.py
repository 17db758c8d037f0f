"""GRPO's hyperparameters (``algo:`` with ``name: grpo``), apart from the algorithm so that reading
a config never imports torch."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from distrl.config.algorithm import AlgorithmSection, RunSections
from distrl.config.base import Section, Size
from distrl.config.sections import ModelConfig
from distrl.sharding import even_counts


class TransformerConfig(Section):
    """The sequence policy's decoder-only transformer (GRPO; ``distrl.models.transformer``),
    GPT-2's layout. The defaults give about 0.4 M parameters."""

    layers: PositiveInt = 2
    """Transformer blocks."""
    width: PositiveInt = 128
    """Embedding width; a multiple of ``heads``."""
    heads: PositiveInt = 4
    """Attention heads per block."""
    context: PositiveInt = 64
    """Positions the model reads: a prompt's tokens plus ``algo.max_new_tokens`` must fit."""
    pretrained: str | None = None
    """A local directory holding a Hugging Face causal LM and its tokenizer (written by their
    ``save_pretrained``), loaded offline as the policy instead of the transformer the keys above
    describe (the ``transformers`` extra). Its tokenizer needs a padding token apart from its end
    token. Resuming and evaluating read the directory again: keep it where it was."""

    @model_validator(mode="after")
    def _whole_heads(self) -> TransformerConfig:
        if self.width % self.heads:
            fits = max(self.heads, self.width - self.width % self.heads)
            raise ValueError(f"width={self.width} is not a multiple of heads={self.heads}; e.g. width={fits}")
        return self


class SequenceModelConfig(ModelConfig):
    """The policy's network, with the sequence policy's transformer (GRPO's ``model:``)."""

    transformer: TransformerConfig = Field(default_factory=TransformerConfig)
    """The sequence policy's transformer."""


class RewardConfig(Section):
    function: str
    """A built-in verifier (``exact_match``: 1 when the completion is the answer, else 0;
    ``positional_match``: the share of the answer's positions the completion gets right, over
    the longer of the two) or a user's ``module:function`` taking ``(prompt, completion,
    answer)`` strings and returning a number."""
    weight: float = 1.0


class TaskConfig(Section):
    """What a sequence policy (GRPO) learns: prompts, each with its answer, and the reward
    functions that score a completion (``distrl.tasks``)."""

    name: Literal["reverse", "sort", "add", "count", "increment", "max"] | None = "reverse"
    """The built-in prompt generator: ``reverse`` a digit string (``rev 123=`` -> ``321``),
    ``sort`` its digits (``sort 312=`` -> ``123``), ``add`` two numbers (``12+34=`` -> ``46``),
    ``count`` a digit's occurrences (``cnt 3 3534=`` -> ``2``), ``increment`` every digit, 9 to 0
    (``inc 319=`` -> ``420``), or give the ``max`` digit (``max 3817=`` -> ``8``); ``min_length``
    to ``max_length`` digits (per number for ``add``). Null with ``task.prompts``, which replaces
    the generator."""
    prompts: str | None = None
    """Instead of the generator: a JSONL file, or a Parquet file or directory, with ``prompt`` and
    ``answer`` string columns."""
    alphabet: str | None = None
    """The characters of the character-level tokenizer (besides padding and the end token);
    unset: the built-in generator's own (``0123456789rev =`` for ``reverse``), or digits, lowercase
    letters, space and ``+-*=:,.`` for a prompt file. The fewer, the faster a policy learns."""
    min_length: PositiveInt = 1
    """Fewest digits a generated prompt has (per number for ``add``)."""
    max_length: PositiveInt = 8
    """Most digits a generated prompt has (per number for ``add``); held-out prompts all have this many."""
    curriculum_fraction: float = Field(0.0, ge=0.0, le=1.0)
    """The curriculum: the longest length drawn grows from ``min_length`` to ``max_length`` over
    this fraction of ``train.total_steps`` (0: every length from the start)."""
    held_out_fraction: float = Field(0.1, gt=0.0, lt=1.0)
    """Share of all possible prompts kept out of training (chosen by a hash of the prompt): the
    held-out prompts that evaluation scores, at ``max_length``."""
    rewards: list[RewardConfig] = Field(default_factory=lambda: [RewardConfig(function="exact_match")])
    """The reward functions; a completion's reward is their weighted sum."""
    unfinished_reward: float = 0.0
    """The reward of a completion that never ends (no end token within ``algo.max_new_tokens``);
    such completions are counted (``unfinished_fraction``), not scored."""
    reward_timeout_s: PositiveFloat | None = 60.0
    """A reward function's call that runs longer than this many seconds is cut off, and the run
    stops with one line naming the function and the prompt (as for a function that raises);
    null: no limit."""

    @model_validator(mode="after")
    def _prompts_replace_the_generator(self) -> TaskConfig:
        # Shown as it is (``distrl config``, the run's config.yaml): no generator runs.
        if self.prompts is not None:
            self.__dict__["name"] = None
        elif self.name is None:
            raise ValueError("name is null and no task.prompts is given; name a generator or a prompts file")
        return self

    @model_validator(mode="after")
    def _lengths_in_order(self) -> TaskConfig:
        if self.min_length > self.max_length:
            raise ValueError(
                f"min_length={self.min_length} is more than max_length={self.max_length}; "
                "lower task.min_length or raise task.max_length"
            )
        return self


class GRPOConfig(AlgorithmSection):
    """Group Relative Policy Optimization (Shao et al. 2024) for a sequence policy: G completions
    per prompt, each scored by the task's reward functions, advantages relative to the group."""

    resume_fixed_keys: ClassVar[tuple[str, ...]] = (
        "model.transformer.heads",  # how attention splits the width: the same shapes either way
        "model.transformer.pretrained",  # also the tokenizer; two models may share their shapes
        "task.name",  # another task, whose alphabet may have as many characters
        "task.alphabet",  # which character each token is: as many characters give the same shapes
    )
    step_unit: ClassVar[str] = "completions"
    honoured_train_switches: ClassVar[tuple[str, ...]] = (
        "activation_checkpointing",
        "gradient_accumulation_steps",
        "optimizer_offload",
        "sharding",
        "hold_unsharded_gradients",
    )
    sections: ClassVar[dict[str, type[Section]]] = {"task": TaskConfig, "model": SequenceModelConfig}
    phases: ClassVar[tuple[str, ...]] = ("generate", "score", "log_probs")
    collection_phases: ClassVar[tuple[str, ...]] = ("generate",)

    name: Literal["grpo"] = "grpo"
    """The algorithm: group relative policy optimisation for sequence policies."""
    num_prompts_per_step: PositiveInt = 32
    """Prompts per update summed over all ranks (each rank generates for its share)."""
    num_generations_per_prompt: int = Field(8, ge=2)
    """G: completions sampled per prompt, the group each is compared with (at least 2)."""
    dynamic_sampling: bool = False
    """DAPO's dynamic sampling: generate for ``dynamic_sampling_factor`` times
    ``num_prompts_per_step`` prompts and train on the first ``num_prompts_per_step`` of them (in
    global prompt order) whose G rewards are not all equal, or on all such if fewer are. A group
    of equal rewards has zero advantages: it adds no policy gradient and only dilutes the others'
    token mean (and leaves the entropy bonus in charge of the step). ``train.total_steps`` counts
    every completion generated."""
    dynamic_sampling_factor: int = Field(2, ge=2)
    """With ``dynamic_sampling``: prompts generated for per update, as a multiple of
    ``num_prompts_per_step``."""
    max_new_tokens: PositiveInt = 16
    """The longest completion, its end token included; one that has not ended by then is
    unfinished (``task.unfinished_reward``)."""
    generation_weights: Literal["gathered", "sharded"] = "gathered"
    """With ``train.sharding``: the weights generation's forward passes take. ``gathered``: the
    whole weights, gathered once per step and freed after (a whole copy while generating; each
    rank decodes on its own); ``sharded``: a layer's weights gathered for each pass and freed
    after it (no whole copy; the ranks decode in lockstep, a collective per layer and token)."""
    sequence_packing_tokens: PositiveInt | None = None
    """Sequence packing in the loss and log-probability passes (off when unset): each
    completion's real tokens (its prompt's, then its own) laid one after another in rows of this
    many tokens (at least the longest sequence's), attention kept within each, instead of one a
    row padded to the longest. Fewer positions computed when lengths vary; one pass a
    micro-batch (``storage.packing``)."""
    temperature: PositiveFloat = 1.0
    """Sampling temperature; the log-probabilities of the loss use the same scaling."""
    top_k: PositiveInt | None = None
    """Sample only among the k most likely tokens (unset: all)."""
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    """Nucleus sampling: only among the most likely tokens whose probabilities sum to this (1: all)."""
    baseline: Literal["leave_one_out", "mean"] = "leave_one_out"
    """A completion's baseline: the mean reward of the other G-1 completions of its prompt, or of
    all G."""
    scale_by_std: bool = False
    """Divide advantages by the group's reward standard deviation (the GRPO paper's; Dr. GRPO
    leaves it out). A group whose rewards are all equal has zero advantages either way."""
    ratio_clip_min: PositiveFloat = 0.2
    """The probability ratio is clipped below at 1 - this."""
    ratio_clip_max: PositiveFloat = 0.2
    """... and above at 1 + this (DAPO's clip-higher raises it)."""
    importance_sampling_correction: bool = True
    """Asynchronous GRPO (generation workers ``collect.lag`` steps ahead, Ray mode): each token's
    clipped surrogate is weighted by the truncated importance ratio of the learner's policy
    before the update to the policy that generated it, ``min(pi_old / pi_gen,
    importance_sampling_cap)`` (truncated importance sampling), and the ratio compares with the
    learner's policy. Off: the lag is ignored (the ratio compares with the learner's policy alone)."""
    importance_sampling_cap: PositiveFloat = 2.0
    """The truncation of ``importance_sampling_correction``'s weights."""
    loss_normalization: Literal["token", "sequence"] = "token"
    """``token``: the loss is a mean over every completion token of the global minibatch (long
    completions weigh more); ``sequence``: a mean over completions of each one's token mean."""
    entropy_coef: NonNegativeFloat = 0.0
    """Weight of an entropy bonus per completion token (normalised as the loss is): keeps a policy
    that has solved its easy prompts exploring, so its groups keep differing."""
    entropy_target: PositiveFloat | None = None
    """A floor on the sampling policy's mean token entropy (nats; unset: none). While a batch's
    entropy is below it, the bonus's weight is ``entropy_coef`` times target/entropy (at most
    ``entropy_boost_max`` times): a fixed bonus stops pulling once the policy is almost
    deterministic, and then a group's completions are all the same, its rewards equal and its
    advantages zero, so it teaches nothing."""
    entropy_boost_max: float = Field(10.0, ge=1.0)
    """The most ``entropy_target`` multiplies ``entropy_coef`` by."""
    kl_coef: NonNegativeFloat = 0.0
    """Weight of the KL penalty to the frozen initial policy (0: none, no reference kept)."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """Schulman's estimators of KL(policy || reference) from log r = log ref - log policy: k1 =
    -log r, k2 = (log r)^2 / 2, k3 = r - 1 - log r."""
    kl_input_clamp: PositiveFloat = 20.0
    """log r is clamped to [-this, this] before the estimator."""
    kl_output_clamp: PositiveFloat = 10.0
    """Each token's estimate is clamped to [-this, this]."""
    update_epochs: PositiveInt = 1
    """Passes over each batch of completions; with more than one pass (or minibatch) the ratio
    is taken against the generating policy's log-probabilities."""
    num_minibatches: PositiveInt = 1
    """Optimiser steps per pass, each on a share of the global batch's prompts (whole groups)."""
    learning_rate: PositiveFloat = 1e-3
    """AdamW's learning rate (its start, with ``anneal_lr``)."""
    anneal_lr: bool = True
    """Decay the learning rate linearly to zero over ``train.total_steps``."""
    max_grad_norm: PositiveFloat = 1.0
    """Clip the global gradient norm, computed after the cross-rank average."""
    adam_eps: PositiveFloat = 1e-8
    """AdamW's epsilon."""
    weight_decay: NonNegativeFloat = 0.0
    """AdamW's decoupled weight decay."""

    @property
    def drawn_prompts(self) -> int:
        """Prompts generated for per update over all ranks: ``num_prompts_per_step``, times
        ``dynamic_sampling_factor`` with ``dynamic_sampling``."""
        return self.num_prompts_per_step * (self.dynamic_sampling_factor if self.dynamic_sampling else 1)

    def sizes(self, run: RunSections, world_size: int) -> list[Size]:
        prompts = even_counts(self.drawn_prompts, world_size)
        group = self.num_generations_per_prompt
        completions = self.drawn_prompts * group
        updates = -(-run.train.total_steps // completions)
        return [
            Size(
                "prompts generated per update" if self.dynamic_sampling else "prompts per update",
                self.drawn_prompts,
                prompts,
            ),
            Size("completions per update", completions, [count * group for count in prompts]),
            Size("minibatches per epoch", self.num_minibatches, [self.num_minibatches] * world_size),
            Size("updates", updates, [updates] * world_size),
        ]
