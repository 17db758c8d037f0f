"""DQN's acting while it collects: epsilon-greedy in its Q-network, the numbers it draws (whether
to explore, which action) from ``collect.transitions.exploration_noise``, so splitting a rank's
envs over workers changes no env's action; its collector (``Algorithm.collector``) is
``epsilon_greedy_collector``, and ``q_network_copies`` what an env worker acts with."""

from __future__ import annotations

from typing import TYPE_CHECKING

import gymnasium as gym
import torch
from torch import nn

from distrl.algorithms.dqn.networks import make_q_network
from distrl.collect.base import CollectorInputs
from distrl.collect.transitions import TransitionCollector, exploration_noise

if TYPE_CHECKING:
    from distrl.config.run import RunConfig


class EpsilonGreedy(nn.Module):
    """DQN's acting: the greedy action of ``q_network`` (a value per Discrete action), or with
    probability ``exploration`` (epsilon) a uniformly random one, which may be the greedy one
    too. So an action's probability is (1 - epsilon) [it is greedy] + epsilon / actions: the
    greedy one's 1 - epsilon + epsilon / actions, any other's epsilon / actions (summing to 1)."""

    def __init__(self, q_network: nn.Module) -> None:
        super().__init__()
        self.q_network = q_network

    def forward(
        self, obs: torch.Tensor, uniform: torch.Tensor, exploration: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        num_actions = self.q_network.num_actions
        greedy = self.q_network(obs).argmax(dim=-1)
        random_actions = (uniform[:, 1] * num_actions).long().clamp_(max=num_actions - 1)
        actions = torch.where(uniform[:, 0] < exploration, random_actions, greedy)
        # log 0 (epsilon 0) only where no action was taken: never selected.
        chance = exploration / num_actions
        return actions, torch.where(actions == greedy, 1.0 - exploration + chance, chance).log()


def epsilon_greedy_collector(inputs: CollectorInputs) -> TransitionCollector:
    """DQN's collector (``Algorithm.collector``): epsilon-greedy in the ``q_network`` of
    ``inputs.modules``."""
    noise = exploration_noise(inputs.noise_seed, inputs.noise_rows, inputs.part, inputs.device)
    exploring = EpsilonGreedy(inputs.modules["q_network"])
    return TransitionCollector(inputs.cfg, inputs.env, exploring, noise, inputs.device, inputs.clock)


def q_network_copies(
    cfg: RunConfig, observation_space: gym.Space, action_space: gym.Space, device: torch.device
) -> dict[str, nn.Module]:
    """What DQN acts with, freshly built (``Algorithm.acting``)."""
    return {"q_network": make_q_network(cfg, observation_space, action_space, device)}
