"""Counterfactual policy evaluation from logged data (ReAgent's CPE): one-step and sequential
estimators with bootstrap intervals (``estimators``), and their use on a DQN's greedy policy
(``dqn``)."""
