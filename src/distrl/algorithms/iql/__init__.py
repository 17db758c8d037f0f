"""Implicit Q-learning (Kostrikov et al. 2021) from logged data as one package: ``config`` (its
``algo:`` section), ``networks``, ``update``, ``runner``, read in that order (it learns from logs:
no acting while collecting); below, its catalogue entry, naming each of them as a
``module:attribute`` string imported only when used (reading a config imports no torch)."""

from __future__ import annotations

from distrl.algorithms.iql.config import IQLConfig
from distrl.algos.algorithm import LOGGED_DATA, Algorithm

ALGORITHM = Algorithm(
    "iql",
    IQLConfig,
    deployable_policy="distrl.algorithms.iql.networks:iql_policy",
    runners={LOGGED_DATA: "distrl.algorithms.iql.runner:IQLRunner"},
)
"""IQL in the catalogue (``algos.registry.ALGORITHMS``: ``"iql": "distrl.algorithms.iql:ALGORITHM"``)."""
