"""The reward model r-hat(x, a) of the one-step estimators (DM, DR), as ReAgent trains one for
them: a small MLP from a row's observation features to one predicted immediate reward per
action, fitted by least squares on the logged action's output.

A DQN's Q-network cannot serve here: on a multi-step log it predicts discounted returns, while DM
and DR value each row's immediate reward. The fit depends on the logged rows alone, never on the
policy being evaluated, so one fit serves every evaluation of a dataset. It is seeded and runs on
the CPU for a fixed number of minibatch steps: the same rows give the same model, in bounded time
whatever the dataset's size.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from distrl.models.actor_critic import mlp

HIDDEN_SIZES = [64, 64]
"""Widths of the MLP's hidden layers (ReLU)."""
STEPS = 500
"""Adam steps of one fit, each on a minibatch drawn with replacement from the rows."""
BATCH_SIZE = 512
"""Rows per minibatch."""
LEARNING_RATE = 3e-3
"""Adam's step size."""
SEED = 0
"""Seed of the initial weights and of the minibatches."""


class RewardModel(nn.Module):
    """r-hat(x, a) for every action a: features and rewards standardised by the fitted rows'
    moments inside, so one step size suits any scale of either."""

    def __init__(self, obs: torch.Tensor, rewards: torch.Tensor, num_actions: int) -> None:
        super().__init__()
        self.register_buffer("obs_mean", obs.mean(dim=0))
        self.register_buffer("obs_std", _nonzero(obs.std(dim=0)))
        self.register_buffer("reward_mean", rewards.mean())
        self.register_buffer("reward_std", _nonzero(rewards.std()))
        self.net = mlp(obs.shape[1], HIDDEN_SIZES, num_actions, "relu", out_gain=1.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """[rows, actions] predicted immediate rewards."""
        return self.net((obs - self.obs_mean) / self.obs_std) * self.reward_std + self.reward_mean


def _nonzero(std: torch.Tensor) -> torch.Tensor:
    """A constant column (CartPole's reward of 1) has nothing to scale: divide it by 1."""
    return torch.where(std > 0, std, torch.ones_like(std))


def fit_reward_model(
    obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, num_actions: int
) -> RewardModel:
    """r-hat fitted on logged rows (``obs`` [rows, features], ``actions`` and ``rewards`` [rows]):
    mean squared error between each row's reward and the model's output for its logged action."""
    obs_t = torch.as_tensor(obs, dtype=torch.float32)
    actions_t = torch.as_tensor(actions, dtype=torch.int64)
    rewards_t = torch.as_tensor(rewards, dtype=torch.float32)
    with torch.random.fork_rng(devices=[]):  # seeded weights without moving the caller's generator
        torch.manual_seed(SEED)
        model = RewardModel(obs_t, rewards_t, num_actions)
    minibatches = torch.Generator().manual_seed(SEED)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    # Decayed to 0 over the fit: the last steps average out minibatch noise instead of adding it.
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0 - step / STEPS)
    threads = torch.get_num_threads()
    # Minibatches this small gain nothing from a second thread, and on a busy machine threads
    # that wait for each other made a 1 s fit take 15 s.
    torch.set_num_threads(1)
    try:
        for _ in range(STEPS):
            batch = torch.randint(len(obs_t), (BATCH_SIZE,), generator=minibatches)
            predicted = model(obs_t[batch]).gather(1, actions_t[batch, None]).squeeze(1)
            loss = nn.functional.mse_loss(predicted, rewards_t[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            schedule.step()
    finally:
        torch.set_num_threads(threads)
    return model.eval()
