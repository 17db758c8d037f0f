"""PPO's hyperparameters (``algo:`` with ``name: ppo``), apart from the algorithm so that reading a
config never imports torch (Ray mode's driver does not need it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from distrl.config.base import Section, Size, at_most_one, default_unless_either
from distrl.sharding import env_counts

if TYPE_CHECKING:
    from distrl.config.run import RunConfig

DEFAULT_MINIBATCH_SIZE = 256


class PPOConfig(Section):
    """Clipped-surrogate PPO; ``algo.name: ppo`` (the default)."""

    resume_fixed_keys: ClassVar[tuple[str, ...]] = (
        "model.encoder",
        "model.channels",
        "model.hidden_sizes",
        "model.activation",
        "model.memory",
        "model.memory_size",
        "normalize.observations",
        "normalize.rewards",
    )
    """Keys a resumed run may not change: they decide the shapes of what the checkpoint holds."""
    step_unit: ClassVar[str] = "env steps"
    """What ``train.total_steps`` counts, in the final line."""
    honoured_train_switches: ClassVar[tuple[str, ...]] = ("compile",)
    """The ``train`` keys (``config.run.TRAIN_SWITCHES``) its torch learner honours."""

    name: Literal["ppo"] = "ppo"
    """The algorithm: decentralized distributed PPO."""
    rollout_steps: PositiveInt = 128
    """Steps collected per env per update (per rank)."""
    minibatch_size: PositiveInt | None = None
    """Samples per optimiser step summed over all ranks (the global minibatch). Each epoch makes
    round(global batch / minibatch_size) steps and every rank splits its rollout into that many
    parts, so adding ranks adds optimiser steps in proportion to the data while each step's
    batch stays the same. 256 when neither this nor ``num_minibatches`` is given."""
    num_minibatches: PositiveInt | None = None
    """Instead of ``minibatch_size``: a fixed number of minibatches per epoch whatever the number
    of ranks (each rank splits its rollout into this many, so the global minibatch grows with the
    ranks); rollouts that do not divide evenly give parts that differ by one sample."""
    update_epochs: PositiveInt = 4
    """Passes over each rollout per update."""
    learning_rate: PositiveFloat = 2.5e-4
    """Adam's learning rate (its start, with ``anneal_lr``)."""
    anneal_lr: bool = True
    """Linearly decay the learning rate to zero over ``train.total_steps``."""
    gamma: float = Field(0.99, ge=0.0, le=1.0)
    """Discount factor."""
    gae_lambda: float = Field(0.95, ge=0.0, le=1.0)
    """GAE's lambda: 1 is the Monte Carlo return, 0 the one-step TD error."""
    clip_coef: PositiveFloat = 0.2
    """The probability ratio is clipped to [1 - this, 1 + this]."""
    clip_value_loss: bool = True
    """Clip the value function's change per update by ``clip_coef`` as well (CleanRL's default)."""
    value_coef: float = Field(0.5, ge=0.0)
    """Weight of the value loss in the total loss."""
    entropy_coef: float = Field(0.0, ge=0.0)
    """Weight of the entropy bonus in the total loss."""
    max_grad_norm: PositiveFloat = 0.5
    """Clip the global gradient norm, computed after the cross-rank average."""
    normalize_advantages: bool = True
    """Normalise advantages with the mean/std of the whole global rollout (all ranks)."""
    adam_eps: PositiveFloat = 1e-5
    """Adam's epsilon."""
    bptt_len: PositiveInt | None = None
    """With ``model.memory``: the update replays the rollout in chunks of this many steps of one
    env (truncated backpropagation through time), each from the state acting had at its first
    step; minibatches are whole chunks. It must divide ``rollout_steps``; unset: the whole
    rollout is one chunk per env (CleanRL's LSTM PPO)."""

    @model_validator(mode="before")
    @classmethod
    def _default_minibatch_rule(cls, data: Any) -> Any:
        return default_unless_either(data, "minibatch_size", "num_minibatches", DEFAULT_MINIBATCH_SIZE)

    @model_validator(mode="after")
    def _one_minibatch_rule(self) -> PPOConfig:
        return at_most_one(self, "algo", "minibatch_size", "num_minibatches")

    @model_validator(mode="after")
    def _whole_chunks(self) -> PPOConfig:
        if self.bptt_len is not None and self.rollout_steps % self.bptt_len:
            raise ValueError(
                f"algo.bptt_len={self.bptt_len} does not divide algo.rollout_steps={self.rollout_steps}; "
                "use a divisor of it"
            )
        return self

    def sequence_length(self, memory: bool) -> int:
        """Steps of one env per chunk in the update: ``bptt_len`` (or the whole rollout) with
        memory; single steps without."""
        return (self.bptt_len or self.rollout_steps) if memory else 1

    def minibatches_per_epoch(self, global_batch: int) -> int:
        """Optimiser steps per epoch: ``num_minibatches`` when given, else the global batch (summed
        over ranks) divided by ``minibatch_size``, rounded half up and at least one."""
        if self.num_minibatches is not None:
            return self.num_minibatches
        return max(1, (global_batch + self.minibatch_size // 2) // self.minibatch_size)

    def sizes(self, run: RunConfig, world_size: int) -> list[Size]:
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
