"""APPO's hyperparameters (``algo:`` with ``name: appo``): PPO's, plus V-trace's truncation levels
and the target network's cadence."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field, PositiveFloat, PositiveInt

from distrl.algos.ppo_config import PPOConfig


class APPOConfig(PPOConfig):
    """Asynchronous PPO (RLlib's APPO): PPO's clipped surrogate on V-trace advantages, for samples
    acted by older weights (``collect.lag``); the surrogate's ratio is taken against a target
    network, and V-trace's importance ratios are the target network's over the policy that acted."""

    honoured_train_switches: ClassVar[tuple[str, ...]] = ("compile", "sharding")

    name: Literal["appo"]  # type: ignore[assignment]
    """The algorithm: asynchronous PPO with V-trace."""
    clip_value_loss: bool = False
    """Clip the value function's change per update by ``clip_coef`` as well (off: V-trace's
    targets already bound what one update asks of it)."""
    vtrace_rho_bar: PositiveFloat = 1.0
    """V-trace's truncation of the importance ratio in its TD errors and advantages (IMPALA's rho bar)."""
    vtrace_c_bar: PositiveFloat = 1.0
    """V-trace's truncation of the importance ratio in its traces (IMPALA's c bar)."""
    gae_lambda: float = Field(1.0, ge=0.0, le=1.0)
    """V-trace's lambda: its traces are multiplied by it (1: IMPALA's V-trace; with no lag its
    value targets are then TD(lambda)'s)."""
    max_importance_ratio: PositiveFloat = 2.0
    """RLlib's APPO: the ratio of the acting policy to the target network is clipped to [0, this]
    in PPO's ratio (``clip(mu / target) * pi / mu``, ``pi / target`` below the clip)."""
    target_update_every: PositiveInt = 1
    """Updates between copies of the policy into the target network (1: the target network is the
    policy as this update began)."""
