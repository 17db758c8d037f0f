"""PPO's hyperparameters (``algo:`` with ``name: ppo``), apart from the algorithm so that reading a
config never imports torch (Ray mode's driver does not need it)."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import PositiveFloat, PositiveInt, model_validator

from distrl.algos.on_policy_config import OnPolicySection
from distrl.config.base import at_most_one, default_unless_either

DEFAULT_MINIBATCH_SIZE = 256


class PPOConfig(OnPolicySection):
    """Clipped-surrogate PPO; ``algo.name: ppo`` (the default)."""

    honoured_train_switches: ClassVar[tuple[str, ...]] = ("compile", "sharding")

    name: Literal["ppo"] = "ppo"
    """The algorithm: decentralized distributed PPO."""
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
    clip_coef: PositiveFloat = 0.2
    """The probability ratio is clipped to [1 - this, 1 + this]."""
    clip_value_loss: bool = True
    """Clip the value function's change per update by ``clip_coef`` as well (CleanRL's default)."""
    adam_eps: PositiveFloat = 1e-5
    """Adam's epsilon."""

    @model_validator(mode="before")
    @classmethod
    def _default_minibatch_rule(cls, data: Any) -> Any:
        return default_unless_either(data, "minibatch_size", "num_minibatches", DEFAULT_MINIBATCH_SIZE)

    @model_validator(mode="after")
    def _one_minibatch_rule(self) -> PPOConfig:
        return at_most_one(self, "algo", "minibatch_size", "num_minibatches")

    def minibatches_per_epoch(self, global_batch: int) -> int:
        """Optimiser steps per epoch: ``num_minibatches`` when given, else the global batch (summed
        over ranks) divided by ``minibatch_size``, rounded half up and at least one."""
        if self.num_minibatches is not None:
            return self.num_minibatches
        return max(1, (global_batch + self.minibatch_size // 2) // self.minibatch_size)
