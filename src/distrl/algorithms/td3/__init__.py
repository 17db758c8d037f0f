"""TD3 (Fujimoto et al. 2018, "Addressing Function Approximation Error in Actor-Critic Methods")
as one package: ``config`` (its ``algo:`` section), ``networks``, ``acting``, ``update``,
``runner``, read in that order; below, its catalogue entry, naming each of them as a
``module:attribute`` string imported only when used (reading a config imports no torch)."""

from __future__ import annotations

from distrl.algorithms.td3.config import TD3Config
from distrl.algos.algorithm import ENVS, Algorithm

ALGORITHM = Algorithm(
    "td3",
    TD3Config,
    deployable_policy="distrl.algorithms.td3.networks:td3_policy",
    runners={ENVS: "distrl.algorithms.td3.runner:TD3Runner"},
    collector="distrl.algorithms.td3.acting:td3_collector",
    acting="distrl.algorithms.td3.acting:actor_copies",
)
"""TD3 in the catalogue (``algos.registry.ALGORITHMS``: ``"td3": "distrl.algorithms.td3:ALGORITHM"``)."""
