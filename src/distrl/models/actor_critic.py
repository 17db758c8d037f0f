"""PPO's actor-critic: an encoder, an optional recurrent core (``distrl.models.memory``), and an
actor and a critic head."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, ClassVar

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from distrl.envs.base import obs_tensor_dtype
from distrl.models.encoders import ImageEncoder, encode, observation_encoder
from distrl.models.linear import Linear
from distrl.models.memory import RecurrentCore
from distrl.models.normalizer import RunningMeanStd

if TYPE_CHECKING:  # annotations only
    from distrl.config.sections import ModelConfig

ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


def _layer(n_in: int, n_out: int, gain: float | None) -> nn.Linear:
    """Orthogonal weights, zero bias: the initialisation PPO's reference results rely on; with
    ``gain`` None, torch's default initialisation (SAC's, in SB3 and CleanRL)."""
    layer = Linear(n_in, n_out)
    if gain is not None:
        nn.init.orthogonal_(layer.weight, gain)
        nn.init.zeros_(layer.bias)
    return layer


def mlp(n_in: int, hidden: list[int], n_out: int, activation: str, out_gain: float | None) -> nn.Sequential:
    """Hidden layers of ``activation``, then a linear output; orthogonal with gains sqrt(2) and
    ``out_gain``, or torch's default initialisation throughout when ``out_gain`` is None."""
    layers: list[nn.Module] = []
    hidden_gain = None if out_gain is None else math.sqrt(2)
    for width in hidden:
        layers += [_layer(n_in, width, hidden_gain), ACTIVATIONS[activation]()]
        n_in = width
    layers.append(_layer(n_in, n_out, out_gain))
    return nn.Sequential(*layers)


class ActorCritic(nn.Module):
    """Categorical policy for Discrete actions (one per dimension for MultiDiscrete), diagonal
    Gaussian with state-independent log-std for Box actions. Feature vectors: separate actor and
    critic MLPs (CleanRL's PPO). Images: one shared encoder (``model.encoder``) and a linear head
    each (CleanRL's Atari PPO). With ``model.memory`` a recurrent core shared by both sits before
    the heads (MLPs take its output instead of the observation), and every call takes and gives
    the memory state (``[rows, state_size]``, width 0 without memory)."""

    forward_methods: ClassVar[tuple[str, ...]] = ("action_stats",)
    """Its methods that run training's forward passes (it has no ``forward``): a sharded learner
    gathers the weights around them (``comm.sharded``)."""

    def __init__(
        self, observation: int | gym.spaces.Box, action_space: gym.spaces.Space, cfg: ModelConfig
    ) -> None:
        """``observation``: the observation space, or the length of a feature vector."""
        super().__init__()
        self.continuous = isinstance(action_space, gym.spaces.Box)
        self.multi_discrete = isinstance(action_space, gym.spaces.MultiDiscrete)
        self.action_sizes = categorical_sizes(action_space)
        """Choices of each categorical sub-action (one for Discrete); empty for Box actions."""
        n_out = action_space.shape[0] if self.continuous else sum(self.action_sizes)
        self.low_precision: torch.dtype | None = None
        """The encoder's autocast dtype (``distrl.precision``); None: float32."""
        self.encoder, features = observation_encoder(observation, cfg)
        self.memory: RecurrentCore | None = None
        if cfg.memory != "none":
            self.memory = RecurrentCore(cfg.memory, features, cfg.memory_size)
            features = self.memory.size
        if isinstance(self.encoder, ImageEncoder):
            self.actor = nn.Sequential(_layer(features, n_out, 0.01))
            self.critic = nn.Sequential(_layer(features, 1, 1.0))
        else:
            self.actor = mlp(features, cfg.hidden_sizes, n_out, cfg.activation, out_gain=0.01)
            self.critic = mlp(features, cfg.hidden_sizes, 1, cfg.activation, out_gain=1.0)
        if self.continuous:
            self.log_std = nn.Parameter(torch.full((n_out,), cfg.init_log_std))

    @property
    def state_size(self) -> int:
        """Width of one env's memory state (0 without memory)."""
        return 0 if self.memory is None else self.memory.state_size

    def initial_state(self, rows: int, device: torch.device | None = None) -> torch.Tensor:
        """The state an episode starts from: zeros, in the parameters' dtype."""
        weight = self.actor[-1].weight
        return torch.zeros(rows, self.state_size, dtype=weight.dtype, device=device or weight.device)

    def action_stats(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        start_states: torch.Tensor | None = None,
        dones: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(log-prob of ``actions``, entropy, value) for the PPO loss, with gradients. With memory
        the rows are chunks of consecutive steps, step-major (``[steps * chunks]``), each chunk
        starting from its row of ``start_states`` and reset after the steps ``dones`` marks."""
        features = self.features(obs)
        if self.memory is not None:
            assert start_states is not None and dones is not None, (
                "a recurrent update needs its chunks' states"
            )
            chunks = start_states.shape[0]
            steps = features.view(-1, chunks, features.shape[-1])
            features = self.memory.sequence(steps, start_states, dones.view(-1, chunks)).flatten(0, 1)
        out = self.actor(features)
        if self.continuous:
            log_probs = gaussian_log_prob(out, self.log_std, actions)
            entropy = gaussian_entropy(self.log_std).expand(out.shape[0])
        else:
            log_ps = self.categorical_log_probs(out)
            chosen = actions.long().view(out.shape[0], len(log_ps))
            log_probs = torch.cat([lp.gather(-1, chosen[:, i : i + 1]) for i, lp in enumerate(log_ps)], -1)
            log_probs = log_probs.sum(-1)
            entropy = torch.stack([-(lp.exp() * lp).sum(-1) for lp in log_ps], -1).sum(-1)
        return log_probs, entropy, self.critic(features).squeeze(-1)

    def categorical_log_probs(self, logits: torch.Tensor) -> list[torch.Tensor]:
        """Each categorical sub-action's log-probabilities (one for Discrete actions)."""
        return [part.log_softmax(-1) for part in logits.split(self.action_sizes, dim=-1)]

    def _as_actions(self, per_sub_action: torch.Tensor) -> torch.Tensor:
        """``[rows, sub-actions]`` as the env takes them: ``[rows]`` for Discrete."""
        return per_sub_action if self.multi_discrete else per_sub_action.squeeze(-1)

    def features(self, obs: torch.Tensor) -> torch.Tensor:
        """The encoder's output in float32 (run in ``low_precision`` where set)."""
        return encode(self.encoder, obs, self.low_precision)

    def remember(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One step: (the heads' input, the next state); without memory the encoder's features and
        ``state`` as it was."""
        features = self.features(obs)
        return (features, state) if self.memory is None else self.memory.step(features, state)

    def value(self, obs: torch.Tensor, state: torch.Tensor) -> torch.Tensor:
        return self.critic(self.remember(obs, state)[0]).squeeze(-1)

    def noise_shape(self, rows: int) -> tuple[int, ...]:
        """Shape of the random numbers ``act`` needs for ``rows`` observations."""
        if self.continuous:
            return (rows, self.log_std.shape[0])
        return (rows, len(self.action_sizes)) if self.multi_discrete else (rows,)

    @torch.no_grad()
    def act(
        self, obs: torch.Tensor, noise: torch.Tensor, state: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """Sample actions from given noise: standard normal ``noise_shape`` for the Gaussian,
        uniform [0, 1) per row and sub-action for the categorical (inverse CDF). Returns (actions, log-probs,
        values, next memory states) for the rollout. The caller owns the noise, so a row's
        action does not depend on which other rows share the batch."""
        features, next_state = self.remember(obs, state)
        out = self.actor(features)
        if self.continuous:
            actions = out + self.log_std.exp() * noise
            log_probs = gaussian_log_prob(out, self.log_std, actions)
        else:
            uniform = noise.view(out.shape[0], -1)
            chosen, chosen_log_probs = [], []
            for i, log_p in enumerate(self.categorical_log_probs(out)):
                cdf = log_p.exp().cumsum(-1)
                # The first action whose cumulative probability exceeds u * total: never one with
                # probability 0, even where the float sum ends short of 1 or u is 0.
                u = uniform[:, i : i + 1] * cdf[..., -1:]
                action = torch.searchsorted(cdf, u, right=True).clamp_(max=log_p.shape[-1] - 1)
                chosen.append(action)
                chosen_log_probs.append(log_p.gather(-1, action))
            actions = self._as_actions(torch.cat(chosen, -1))
            log_probs = torch.cat(chosen_log_probs, -1).sum(-1)
        return actions, log_probs, self.critic(features).squeeze(-1), next_state

    @torch.no_grad()
    def act_deterministic(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The Gaussian mean, or the most likely discrete action; and the next memory state."""
        features, next_state = self.remember(obs, state)
        out = self.actor(features)
        if self.continuous:
            return out, next_state
        most_likely = [part.argmax(-1, keepdim=True) for part in out.split(self.action_sizes, dim=-1)]
        return self._as_actions(torch.cat(most_likely, -1)), next_state


def categorical_sizes(action_space: gym.spaces.Space) -> list[int]:
    """The number of choices of each categorical sub-action: one entry for Discrete, one per
    dimension for MultiDiscrete, none for Box."""
    if isinstance(action_space, gym.spaces.Discrete):
        return [int(action_space.n)]
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return [int(n) for n in np.asarray(action_space.nvec).reshape(-1)]
    return []


_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def gaussian_log_prob(mean: torch.Tensor, log_std: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """Log-density of a diagonal Gaussian, summed over action dimensions."""
    z = (actions - mean) * torch.exp(-log_std)
    return (-0.5 * z.pow(2) - log_std - _LOG_SQRT_2PI).sum(-1)


def gaussian_entropy(log_std: torch.Tensor) -> torch.Tensor:
    return (0.5 + _LOG_SQRT_2PI + log_std).sum(-1)


class DeterministicActor(nn.Module):
    """The policy to evaluate or deploy: raw observation in, env action out (observation
    normalisation, then the most likely discrete action or the Gaussian mean clipped to the
    action bounds)."""

    state_size = 0
    """Width of the memory state it takes and gives (``RecurrentActor``); 0: none."""

    def __init__(
        self,
        actor_critic: ActorCritic,
        obs_rms: RunningMeanStd | None,
        obs_clip: float,
        action_space: gym.spaces.Space,
    ) -> None:
        super().__init__()
        self.actor_critic = actor_critic
        self.obs_rms = obs_rms
        self.obs_clip = obs_clip
        if actor_critic.continuous:
            self.register_buffer("action_low", torch.as_tensor(action_space.low, dtype=torch.float32))
            self.register_buffer("action_high", torch.as_tensor(action_space.high, dtype=torch.float32))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.step(obs, self.actor_critic.initial_state(obs.shape[0], obs.device))[0]

    def step(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.obs_rms is not None:
            obs = self.obs_rms.normalize(obs, self.obs_clip)
        action, next_state = self.actor_critic.act_deterministic(obs, state)
        if self.actor_critic.continuous:
            action = torch.maximum(torch.minimum(action, self.action_high), self.action_low)
        return action, next_state


class RecurrentActor(DeterministicActor):
    """A deployable policy with memory: (observations, states) in, (actions, next states) out.
    An episode starts from zeros; the caller zeroes an env's state when its episode ends."""

    input_names = ("obs", "state")
    output_names = ("action", "next_state")

    @property
    def state_size(self) -> int:  # type: ignore[override]
        return self.actor_critic.state_size

    def forward(self, obs: torch.Tensor, state: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]
        return self.step(obs, state)

    def example_inputs(self, observation_space: gym.spaces.Box) -> tuple[torch.Tensor, ...]:
        """Inputs to trace an export with: 2 rows (a traced size of 1 would be fixed in the file)."""
        obs = torch.zeros(2, *observation_space.shape, dtype=obs_tensor_dtype(observation_space))
        return obs, self.actor_critic.initial_state(2)


def deployable_actor(
    actor_critic: ActorCritic, obs_rms: RunningMeanStd | None, obs_clip: float, action_space: gym.spaces.Space
) -> DeterministicActor:
    """``actor_critic`` as a deployable policy: a ``RecurrentActor`` when it has memory."""
    kind = DeterministicActor if actor_critic.memory is None else RecurrentActor
    return kind(actor_critic, obs_rms, obs_clip, action_space)
