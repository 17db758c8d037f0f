"""DQN's hyperparameters (``algo:`` with ``name: dqn``), apart from the algorithm so that reading a
config never imports torch."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from distrl.algos.off_policy_config import OffPolicySection
from distrl.config.base import Section
from distrl.config.sections import EvalConfig


class DQNEvalConfig(EvalConfig):
    """Evaluation, with counterfactual estimates while DQN learns from logged data (``eval:``)."""

    cpe_every: NonNegativeInt = 10
    """Learning from logged data: every this many updates rank 0 estimates the greedy policy's
    value from the log (``cpe/*`` metrics: IPS, DM, DR, SDR, WDR, as ``distrl evaluate-offline``);
    0: never. Needs logged propensities and discrete actions; skipped, with one line, without."""
    cpe_max_rows: PositiveInt = 20_000
    """The estimates use the dataset's first whole episodes up to this many rows."""
    cpe_bootstrap: PositiveInt = 100
    """Bootstrap resamples behind each estimate's confidence interval."""


class DQNConfig(OffPolicySection):
    """Double DQN with a target network; ``algo.name: dqn``. Sizes summed over ranks are marked."""

    resume_fixed_keys: ClassVar[tuple[str, ...]] = ("model.activation",)  # what the weights compute
    honoured_train_switches: ClassVar[tuple[str, ...]] = ("sharding",)
    sections: ClassVar[dict[str, type[Section]]] = {"eval": DQNEvalConfig}
    phases: ClassVar[tuple[str, ...]] = ("replay", "data")
    collection_phases: ClassVar[tuple[str, ...]] = ("env", "inference", "data")

    name: Literal["dqn"]
    """The algorithm: data-parallel (double) DQN, online or from logged data."""
    learning_rate: PositiveFloat = 2.3e-3
    """Adam's learning rate (its start, with ``anneal_lr``)."""
    anneal_lr: bool = False
    """Linearly decay the learning rate to zero over ``train.total_steps``."""
    n_step: PositiveInt = 1
    """Rewards summed before bootstrapping (stopping early where an episode ends)."""
    double_q: bool = True
    """Choose the bootstrap action with the online network, value it with the target network."""
    target_update_interval: PositiveInt = 128
    """Gradient steps between target-network updates."""
    tau: float = Field(1.0, gt=0.0, le=1.0)
    """Target update: 1 copies the online network, less moves the target that far towards it."""
    loss: Literal["huber", "mse"] = "huber"
    """The TD loss: Huber (smooth L1) or squared error."""
    max_grad_norm: PositiveFloat = 10.0
    """Clip the global gradient norm, computed after the cross-rank average."""
    exploration_initial_eps: float = Field(1.0, ge=0.0, le=1.0)
    """Epsilon of epsilon-greedy acting at the start."""
    exploration_final_eps: float = Field(0.04, ge=0.0, le=1.0)
    """Epsilon after ``exploration_fraction`` of the run."""
    exploration_fraction: float = Field(0.16, gt=0.0, le=1.0)
    """Share of ``train.total_steps`` over which epsilon falls linearly to its final value."""
    cql_alpha: NonNegativeFloat = 0.0
    """Weight of the conservative regulariser logsumexp_a Q(s, a) - Q(s, a_logged) (0: off)."""
    adam_eps: PositiveFloat = 1e-8
    """Adam's epsilon."""

    def history_per_env(self, global_envs: int) -> int:
        """At least ``n_step`` steps, so every sample has its n-step return."""
        return max(super().history_per_env(global_envs), self.n_step)
