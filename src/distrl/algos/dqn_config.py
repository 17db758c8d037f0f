"""DQN's hyperparameters (``algo:`` with ``name: dqn``), apart from the algorithm so that reading a
config never imports torch."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from distrl.config.base import Section


class DQNConfig(Section):
    """Double DQN with a target network; ``algo.name: dqn``. Sizes summed over ranks are marked."""

    resume_fixed_keys: ClassVar[tuple[str, ...]] = ("model.hidden_sizes", "model.activation")
    """Keys a resumed run may not change: they decide the shapes of what the checkpoint holds."""
    step_unit: ClassVar[str] = "env steps"
    """What ``train.total_steps`` counts, in the final line."""
    honoured_train_switches: ClassVar[tuple[str, ...]] = ()
    """None: DQN's small-batch steps are not compiled, and its networks have no transformer."""

    name: Literal["dqn"]
    rollout_steps: PositiveInt = 32
    """Env steps per env between rounds of gradient steps (per iteration)."""
    gradient_steps: PositiveInt = 128
    """Gradient steps per iteration: with ``env.num_envs`` global, the ratio of gradient steps to
    env steps is the same on any number of ranks."""
    batch_size: PositiveInt = 64
    """Samples per gradient step summed over all ranks; each rank draws its share from its own
    buffer (ranks differ by at most one sample)."""
    buffer_size: PositiveInt = 100_000
    """Transitions kept, summed over all ranks (each rank keeps the newest of its own envs)."""
    learning_starts: NonNegativeInt = 1_000
    """Global env steps collected before the first gradient step."""
    learning_rate: PositiveFloat = 2.3e-3
    anneal_lr: bool = False
    """Linearly decay the learning rate to zero over ``train.total_steps``."""
    gamma: float = Field(0.99, ge=0.0, le=1.0)
    n_step: PositiveInt = 1
    """Rewards summed before bootstrapping (stopping early where an episode ends)."""
    double_q: bool = True
    """Choose the bootstrap action with the online network, value it with the target network."""
    target_update_interval: PositiveInt = 128
    """Gradient steps between target-network updates."""
    tau: float = Field(1.0, gt=0.0, le=1.0)
    """Target update: 1 copies the online network, less moves the target that far towards it."""
    loss: Literal["huber", "mse"] = "huber"
    max_grad_norm: PositiveFloat = 10.0
    """Clip the global gradient norm, computed after the cross-rank average."""
    exploration_initial_eps: float = Field(1.0, ge=0.0, le=1.0)
    exploration_final_eps: float = Field(0.04, ge=0.0, le=1.0)
    exploration_fraction: float = Field(0.16, gt=0.0, le=1.0)
    """Share of ``train.total_steps`` over which epsilon falls linearly to its final value."""
    cql_alpha: NonNegativeFloat = 0.0
    """Weight of the conservative regulariser logsumexp_a Q(s, a) - Q(s, a_logged) (0: off)."""
    adam_eps: PositiveFloat = 1e-8
