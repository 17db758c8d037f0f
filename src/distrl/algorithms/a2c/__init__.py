"""A2C (Mnih et al. 2016, synchronous; SB3's A2C defaults) as one package: ``config`` (its
``algo:`` section), ``update``, ``runner`` (PPO's with A2C's update rule), read in that order; it
acts and collects as PPO does. Below, its catalogue entry, naming each file as a
``module:attribute`` string imported only when used (reading a config imports no torch)."""

from __future__ import annotations

from distrl.algorithms.a2c.config import A2CConfig
from distrl.algos.algorithm import ENVS, Algorithm

ALGORITHM = Algorithm(
    "a2c",
    A2CConfig,
    deployable_policy="distrl.models.policies:ppo_policy",
    runners={ENVS: "distrl.algorithms.a2c.runner:A2CRunner"},
    collector="distrl.collect.rollout:actor_critic_collector",
    acting="distrl.collect.rollout:actor_critic_copies",
    memory_runners=(ENVS,),
    learner_parameters="distrl.models.policies:actor_critic_parameters",
)
"""A2C in the catalogue (``algos.registry.ALGORITHMS``: ``"a2c": "distrl.algorithms.a2c:ALGORITHM"``)."""
