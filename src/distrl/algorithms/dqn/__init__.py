"""DQN (Mnih et al. 2015; double DQN, n-step returns, Polyak or hard target updates; online from
envs, or offline from logged transitions as ReAgent's, parametric actions included) as one
package: ``config`` (its ``algo:`` section), ``networks``, ``acting``, ``update``, ``runner``
(online) and ``offline_runner``, read in that order. Below, its catalogue entry, naming each as
a ``module:attribute`` string imported only when used (reading a config imports no torch)."""

from __future__ import annotations

from distrl.algorithms.dqn.config import DQNConfig
from distrl.algos.algorithm import ENVS, LOGGED_DATA, Algorithm

ALGORITHM = Algorithm(
    "dqn",
    DQNConfig,
    deployable_policy="distrl.algorithms.dqn.networks:q_policy",
    runners={
        ENVS: "distrl.algorithms.dqn.runner:OffPolicyRunner",
        LOGGED_DATA: "distrl.algorithms.dqn.offline_runner:OfflineRunner",
    },
    collector="distrl.algorithms.dqn.acting:epsilon_greedy_collector",
    acting="distrl.algorithms.dqn.acting:q_network_copies",
    evaluator="distrl.eval.episodes:evaluate_q_policy",
)
"""DQN in the catalogue (``algos.registry.ALGORITHMS``: ``"dqn": "distrl.algorithms.dqn:ALGORITHM"``)."""
