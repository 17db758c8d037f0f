"""``OfflineEvaluator`` on a synthetic episodic log whose mean immediate rewards are known in
closed form: DM and DR value the target policy's immediate reward through the fitted reward
model, not the Q-network's discounted returns; the model is fitted once and deterministically."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from distrl.data.logged import Rows
from distrl.ope import dqn
from distrl.ope.dqn import LoggedSteps, OfflineEvaluator
from distrl.ope.estimators import Bootstrap

FEW = Bootstrap(resamples=20)
EPISODES, STEPS, FEATURES, ACTIONS, GAMMA = 500, 20, 3, 3, 0.9
REWARD_WEIGHTS = np.array([[1.0, 0.0, 0.5], [-1.0, 0.5, 0.0], [0.0, -0.5, -0.5]])
"""[action, feature]: the mean reward of a in x is 1 + tanh(w_a . x)."""


def mean_reward(obs: np.ndarray) -> np.ndarray:
    return 1.0 + np.tanh(obs @ REWARD_WEIGHTS.T)


def log_uniformly(seed: int) -> LoggedSteps:
    """``EPISODES`` episodes of ``STEPS`` steps of a uniform logger; features follow an AR(1) walk
    whatever the action, rewards are the mean plus N(0, 0.3) noise."""
    rng = np.random.default_rng(seed)
    obs = np.empty((STEPS, EPISODES, FEATURES))
    obs[0] = rng.normal(size=(EPISODES, FEATURES))
    for t in range(1, STEPS):
        obs[t] = 0.8 * obs[t - 1] + rng.normal(0.0, 0.6, (EPISODES, FEATURES))
    obs = obs.reshape(-1, FEATURES).astype(np.float32)  # rows step by step, episodes interleaved
    rows = len(obs)
    actions = rng.integers(ACTIONS, size=rows)
    rewards = mean_reward(obs)[np.arange(rows), actions] + rng.normal(0.0, 0.3, rows)
    return LoggedSteps(
        rows=Rows(
            obs=obs,
            actions=actions,
            rewards=rewards.astype(np.float32),
            next_obs=np.zeros_like(obs),  # CPE reads no next observations
            terminal=np.zeros(rows, bool),
            next_action_mask=np.ones((rows, ACTIONS), bool),
            propensity=np.full(rows, 1.0 / ACTIONS),
        ),
        mdp_id=np.tile(np.arange(EPISODES), STEPS).astype(str),
        sequence_number=np.repeat(np.arange(STEPS), EPISODES),
        possible_actions=np.ones((rows, ACTIONS), bool),
    )


def q_network(reward_weights: np.ndarray) -> nn.Module:
    """Q-values on the discounted-return scale: 1 / (1 - gamma) times 1 + w_a . x, whose greedy
    policy picks the action of the largest w_a . x."""
    network = nn.Linear(FEATURES, ACTIONS)
    with torch.no_grad():
        network.weight.copy_(torch.tensor(reward_weights / (1 - GAMMA)))
        network.bias.fill_(1 / (1 - GAMMA))
    return network


def true_immediate_reward(logged: LoggedSteps, network: nn.Module) -> float:
    """The greedy policy's mean immediate reward over the logged states."""
    with torch.no_grad():
        greedy = network(torch.as_tensor(logged.rows.obs)).argmax(dim=1).numpy()
    return float(mean_reward(logged.rows.obs)[np.arange(len(greedy)), greedy].mean())


def test_one_step_estimators_value_immediate_rewards_through_one_reward_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fits = []
    fit_reward_model = dqn.fit_reward_model
    monkeypatch.setattr(dqn, "fit_reward_model", lambda *args: fits.append(args) or fit_reward_model(*args))
    logged = log_uniformly(seed=0)
    evaluator = OfflineEvaluator(logged, GAMMA, FEW)
    # The best policy (true value about 1.7) and one that ranks the actions wrongly (about 0.65);
    # their Q-values are 10 times that.
    for weights in (REWARD_WEIGHTS, np.roll(REWARD_WEIGHTS, 1, axis=0)):
        network = q_network(weights)
        metrics = evaluator.metrics(network)
        truth = true_immediate_reward(logged, network)
        assert metrics["cpe/dm"] == pytest.approx(truth, rel=0.03)
        assert metrics["cpe/dr"] == pytest.approx(truth, rel=0.03)
    assert len(fits) == 1  # the reward model depends on the data alone: one fit for every policy
    # A fresh evaluator fits the same model: the same numbers to the last bit.
    assert OfflineEvaluator(logged, GAMMA, FEW).metrics(network) == metrics
