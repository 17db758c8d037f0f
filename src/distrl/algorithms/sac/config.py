"""SAC's hyperparameters (``algo:`` with ``name: sac``): SB3's defaults, global sizes."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt

from distrl.algos.off_policy_config import OffPolicySection


class SACConfig(OffPolicySection):
    """Soft actor-critic (Haarnoja et al. 2018, with the learned temperature of the follow-up
    paper): twin Q-networks with Polyak-averaged targets, a squashed Gaussian actor, continuous
    (Box) actions. Sizes summed over ranks are marked."""

    resume_fixed_keys: ClassVar[tuple[str, ...]] = (
        "model.activation",  # what the weights compute
        "algo.ent_coef",  # a fixed temperature is saved too: the checkpoint's would win unseen
    )
    honoured_train_switches: ClassVar[tuple[str, ...]] = ("sharding",)

    name: Literal["sac"]
    """The algorithm: data-parallel soft actor-critic."""
    rollout_steps: PositiveInt = 1
    """Env steps per env between rounds of gradient steps (SB3's ``train_freq``)."""
    gradient_steps: PositiveInt = 1
    """Gradient steps per iteration (each of the critics, the actor and the temperature)."""
    batch_size: PositiveInt = 256
    """Samples per gradient step summed over all ranks; each rank draws its share from its own
    buffer (ranks differ by at most one sample)."""
    buffer_size: PositiveInt = 1_000_000
    """Transitions kept, summed over all ranks (each rank keeps the newest of its own envs)."""
    learning_starts: NonNegativeInt = 100
    """Global env steps of uniformly random actions before the first gradient step."""
    learning_rate: PositiveFloat = 3e-4
    """Adam's learning rate for the critics, the actor and the temperature (its start, with
    ``anneal_lr``)."""
    tau: float = Field(0.005, gt=0.0, le=1.0)
    """Polyak step of the target critics towards the critics after each target update."""
    target_update_interval: PositiveInt = 1
    """Gradient steps between target updates."""
    ent_coef: Literal["auto"] | PositiveFloat = "auto"
    """The temperature alpha weighing the entropy bonus: ``auto`` learns it (from 1) so the
    policy's entropy tracks ``target_entropy``; a number fixes it."""
    target_entropy: Literal["auto"] | float = "auto"
    """With ``ent_coef: auto``: the entropy aimed at; ``auto`` is -(action dimensions)."""
    max_grad_norm: PositiveFloat | None = None
    """Clip each network's global gradient norm after the cross-rank average (unset: no
    clipping, as SB3 and CleanRL)."""
    adam_eps: PositiveFloat = 1e-8
    """Adam's epsilon."""
