"""Counterfactual policy evaluation from logged data (ReAgent's CPE): one-step and sequential
estimators with bootstrap intervals (``estimators``), the reward model of the one-step ones
(``reward_model``), and their use on a DQN's greedy policy (``dqn``)."""
