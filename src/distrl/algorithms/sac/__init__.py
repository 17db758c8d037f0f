"""Soft actor-critic (Haarnoja et al. 2018) as one package: ``config`` (its ``algo:`` section),
``networks``, ``acting``, ``update``, ``runner``, read in that order; below, its catalogue entry,
naming each of them as a ``module:attribute`` string imported only when used (reading a config
imports no torch)."""

from __future__ import annotations

from distrl.algorithms.sac.config import SACConfig
from distrl.algos.algorithm import ENVS, Algorithm

ALGORITHM = Algorithm(
    "sac",
    SACConfig,
    deployable_policy="distrl.algorithms.sac.networks:sac_policy",
    runners={ENVS: "distrl.algorithms.sac.runner:SACRunner"},
    collector="distrl.algorithms.sac.acting:squashed_gaussian_collector",
    acting="distrl.algorithms.sac.acting:actor_copies",
)
"""SAC in the catalogue (``algos.registry.ALGORITHMS``: ``"sac": "distrl.algorithms.sac:ALGORITHM"``)."""
