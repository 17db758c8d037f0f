"""Asynchronous PPO with V-trace (RLlib's APPO; Espeholt et al. 2018 for V-trace) as one package:
``config`` (its ``algo:`` section), ``vtrace``, ``update``, ``runner`` (PPO's with V-trace returns
and APPO's update), read in that order; it acts and collects as PPO does. Below, its catalogue
entry, naming each file as a ``module:attribute`` string imported only when used."""

from __future__ import annotations

from distrl.algorithms.appo.config import APPOConfig
from distrl.algos.algorithm import ENVS, Algorithm

ALGORITHM = Algorithm(
    "appo",
    APPOConfig,
    deployable_policy="distrl.models.policies:ppo_policy",
    runners={ENVS: "distrl.algorithms.appo.runner:APPORunner"},
    collector="distrl.collect.rollout:actor_critic_collector",
    acting="distrl.collect.rollout:actor_critic_copies",
    memory_runners=(ENVS,),
)
"""APPO in the catalogue (``algos.registry.ALGORITHMS``: ``"appo": "distrl.algorithms.appo:ALGORITHM"``)."""
