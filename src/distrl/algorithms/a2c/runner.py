"""A2C's runner: PPO's collection, returns and loop (``OnPolicyRunner``) with A2C's update."""

from __future__ import annotations

from distrl.algorithms.a2c.update import A2C
from distrl.runners.on_policy import OnPolicyRunner


class A2CRunner(OnPolicyRunner):
    algorithm = "a2c"
    update_rule = A2C
