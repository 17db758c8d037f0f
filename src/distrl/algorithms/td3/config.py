"""TD3's ``algo:`` section at SB3's TD3 defaults (global sizes); torch-free, so reading a config
imports no torch."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt

from distrl.algos.off_policy_config import OffPolicySection


class TD3Config(OffPolicySection):
    """Twin delayed DDPG: a deterministic actor, twin Q-networks whose smaller target value is
    bootstrapped, noise on the target action, and the actor and both targets updated every
    ``policy_delay`` gradient steps. Continuous (Box) actions. Sizes summed over ranks."""

    resume_fixed_keys: ClassVar[tuple[str, ...]] = ("model.activation",)  # what the weights compute
    honoured_train_switches: ClassVar[tuple[str, ...]] = ("sharding",)

    name: Literal["td3"]
    """The algorithm: data-parallel TD3."""
    rollout_steps: PositiveInt = 1
    """Env steps per env between rounds of gradient steps (SB3's ``train_freq``)."""
    gradient_steps: PositiveInt = 1
    """Gradient steps (of the critics; of the actor every ``policy_delay``) per iteration."""
    batch_size: PositiveInt = 256
    """Samples per gradient step summed over all ranks, each rank drawing its share from its own
    buffer."""
    buffer_size: PositiveInt = 1_000_000
    """Transitions kept, summed over all ranks (each rank keeps the newest of its own envs)."""
    learning_starts: NonNegativeInt = 100
    """Global env steps of uniformly random actions before the first gradient step."""
    learning_rate: PositiveFloat = 1e-3
    """Adam's learning rate, the critics' and the actor's (its start, with ``anneal_lr``)."""
    tau: float = Field(0.005, gt=0.0, le=1.0)
    """Polyak step of both targets towards their networks at each delayed update."""
    policy_delay: PositiveInt = 2
    """Gradient steps per update of the actor and the targets (the paper's d)."""
    target_policy_noise: float = Field(0.2, ge=0.0)
    """Std of the Gaussian added to the target actor's action in the critics' target (target
    policy smoothing), in half-widths of the action bounds."""
    target_noise_clip: float = Field(0.5, ge=0.0)
    """That noise is clipped to [-this, this] (half-widths)."""
    exploration_noise: float = Field(0.1, ge=0.0)
    """Std of the Gaussian added to the actor's action while collecting, in half-widths of the
    bounds (the paper's and CleanRL's 0.1; SB3 adds none unless given an ``action_noise``)."""
    max_grad_norm: PositiveFloat | None = None
    """Clip each network's gradient norm after the cross-rank average (unset: no clipping, as
    the paper, SB3 and CleanRL)."""
    adam_eps: PositiveFloat = 1e-8
    """Adam's epsilon."""
