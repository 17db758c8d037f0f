"""A2C's hyperparameters (``algo:`` with ``name: a2c``): SB3's defaults (rl-zoo's A2C)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, PositiveFloat, PositiveInt

from distrl.algos.on_policy_config import OnPolicySection


class A2CConfig(OnPolicySection):
    """Synchronous advantage actor-critic (Mnih et al. 2016, as SB3's A2C): one RMSprop step on
    each whole rollout, summed over ranks."""

    honoured_train_switches: ClassVar[tuple[str, ...]] = ("sharding",)

    name: Literal["a2c"]
    """The algorithm: synchronous advantage actor-critic."""
    rollout_steps: PositiveInt = 5
    """Steps collected per env per update (per rank; SB3's ``n_steps``)."""
    learning_rate: PositiveFloat = 7e-4
    """RMSprop's learning rate (its start, with ``anneal_lr``)."""
    anneal_lr: bool = False
    """Linearly decay the learning rate to zero over ``train.total_steps``."""
    gae_lambda: float = Field(1.0, ge=0.0, le=1.0)
    """GAE's lambda: 1 (the default) is the n-step return of the rollout, 0 the one-step TD error."""
    normalize_advantages: bool = False
    """Normalise advantages with the mean/std of the whole global rollout (all ranks)."""
    rms_prop_alpha: float = Field(0.99, gt=0.0, lt=1.0)
    """RMSprop's smoothing constant."""
    rms_prop_eps: PositiveFloat = 1e-5
    """RMSprop's epsilon."""

    def minibatches_per_epoch(self, global_batch: int) -> int:
        """One: each update is a single gradient step on the whole global rollout."""
        return 1
