"""What every on-policy actor-critic algorithm's section holds (PPO, A2C): the rollout, the
returns and the loss weights that ``runners.on_policy.OnPolicyRunner`` reads; each algorithm adds
its own update's keys and defaults."""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from distrl.config.algorithm import AlgorithmSection, RunSections
from distrl.config.base import Size
from distrl.sharding import env_counts


class OnPolicySection(AlgorithmSection):
    """An actor-critic trained on the rollout it just collected, with GAE returns."""

    resume_fixed_keys: ClassVar[tuple[str, ...]] = ("model.activation",)  # what the weights compute
    phases: ClassVar[tuple[str, ...]] = ("returns",)
    normalizes: ClassVar[bool] = True  # the runner's running normalisers (models.policies)

    rollout_steps: PositiveInt = 128
    """Steps collected per env per update (per rank)."""
    learning_rate: PositiveFloat = 2.5e-4
    """The optimiser's learning rate (its start, with ``anneal_lr``)."""
    anneal_lr: bool = True
    """Linearly decay the learning rate to zero over ``train.total_steps``."""
    gamma: float = Field(0.99, ge=0.0, le=1.0)
    """Discount factor."""
    gae_lambda: float = Field(0.95, ge=0.0, le=1.0)
    """GAE's lambda: 1 is the Monte Carlo return, 0 the one-step TD error."""
    value_coef: float = Field(0.5, ge=0.0)
    """Weight of the value loss in the total loss."""
    entropy_coef: float = Field(0.0, ge=0.0)
    """Weight of the entropy bonus in the total loss."""
    max_grad_norm: PositiveFloat = 0.5
    """Clip the global gradient norm, computed after the cross-rank average."""
    normalize_advantages: bool = True
    """Normalise advantages with the mean/std of the whole global rollout (all ranks)."""
    bptt_len: PositiveInt | None = None
    """With ``model.memory``: the update replays the rollout in chunks of this many steps of one
    env (truncated backpropagation through time), each from the state acting had at its first
    step; minibatches are whole chunks. It must divide ``rollout_steps``; unset: the whole
    rollout is one chunk per env (CleanRL's LSTM PPO)."""

    @model_validator(mode="after")
    def _whole_chunks(self) -> OnPolicySection:
        if self.bptt_len is not None and self.rollout_steps % self.bptt_len:
            raise ValueError(
                f"algo.bptt_len={self.bptt_len} does not divide algo.rollout_steps={self.rollout_steps}; "
                "use a divisor of it"
            )
        return self

    @abstractmethod
    def minibatches_per_epoch(self, global_batch: int) -> int:
        """Optimiser steps per pass over a rollout of ``global_batch`` samples (all ranks')."""

    def sequence_length(self, memory: bool) -> int:
        """Steps of one env per chunk in the update: ``bptt_len`` (or the whole rollout) with
        memory; single steps without."""
        return (self.bptt_len or self.rollout_steps) if memory else 1

    def sizes(self, run: RunSections, world_size: int) -> list[Size]:
        envs = env_counts(run.env, world_size)
        samples = [self.rollout_steps * count for count in envs]
        minibatches = self.minibatches_per_epoch(sum(samples))
        updates = -(-run.train.total_steps // sum(samples))
        return [
            Size("envs", sum(envs), envs),
            Size("samples per update", sum(samples), samples),
            Size("minibatches per epoch", minibatches, [minibatches] * world_size),
            Size("samples per minibatch", sum(samples) // minibatches, [s // minibatches for s in samples]),
            Size("updates", updates, [updates] * world_size),
        ]
