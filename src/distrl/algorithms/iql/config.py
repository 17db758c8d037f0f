"""IQL's hyperparameters (``algo:`` with ``name: iql``): d3rlpy's defaults, global sizes."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, PositiveFloat, PositiveInt

from distrl.config.algorithm import AlgorithmSection, RunSections
from distrl.config.base import Size
from distrl.sharding import even_counts


class IQLConfig(AlgorithmSection):
    """Implicit Q-learning (Kostrikov et al. 2021) from logged continuous-action transitions
    (``data.path``): an expectile value function, twin Q-networks with Polyak-averaged targets,
    and a Gaussian policy extracted by advantage-weighted regression. Sizes summed over ranks
    are marked."""

    resume_fixed_keys: ClassVar[tuple[str, ...]] = ("model.activation",)  # what the weights compute
    step_unit: ClassVar[str] = "logged transitions"
    honoured_train_switches: ClassVar[tuple[str, ...]] = ("sharding",)
    phases: ClassVar[tuple[str, ...]] = ("data",)
    collection_phases: ClassVar[tuple[str, ...]] = ("data",)

    name: Literal["iql"]
    """The algorithm: data-parallel implicit Q-learning from logged data."""
    gradient_steps: PositiveInt = 100
    """Gradient steps per iteration (of the value, the critics and the actor each)."""
    batch_size: PositiveInt = 256
    """Logged transitions per gradient step summed over all ranks (ranks differ by at most one)."""
    learning_rate: PositiveFloat = 3e-4
    """Adam's learning rate for the value function, the critics and the actor (its start, with
    ``anneal_lr``)."""
    gamma: float = Field(0.99, ge=0.0, le=1.0)
    """Discount factor."""
    tau: float = Field(0.005, gt=0.0, le=1.0)
    """Polyak step of the target critics towards the critics after every gradient step."""
    expectile: float = Field(0.7, gt=0.0, lt=1.0)
    """The value function fits this expectile of the target critics' Q (0.5: their mean; towards
    1: their maximum over the data's actions)."""
    temperature: PositiveFloat = 3.0
    """beta of the policy's weights exp(beta (Q - V)): 0 would clone the data's actions, more
    favours the actions with the highest advantage."""
    max_weight: PositiveFloat = 100.0
    """The policy's weights are clipped to this."""
    actor_cosine_decay: bool = False
    """Decay the actor's learning rate to zero along a cosine over ``train.total_steps`` (the IQL
    authors' schedule, and d3rlpy's in its IQL reproductions; off: d3rlpy's default). The value
    function and the critics keep theirs."""
    max_grad_norm: PositiveFloat | None = None
    """Clip each network's global gradient norm after the cross-rank average (unset: no clipping,
    as d3rlpy)."""
    adam_eps: PositiveFloat = 1e-8
    """Adam's epsilon."""

    def sizes(self, run: RunSections, world_size: int) -> list[Size]:
        return [Size("samples per gradient step", self.batch_size, even_counts(self.batch_size, world_size))]
