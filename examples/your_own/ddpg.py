"""DDPG (Lillicrap et al. 2016, "Continuous control with deep reinforcement learning") as a distrl
plug-in: a deterministic actor mu(s), one critic Q(s, a), target copies of both moved by Polyak
averaging, Gaussian exploration noise, and the actor updated at every gradient step. It runs on
distrl's replay loop (``ReplayRunner``) as the built-in SAC does, with no distrl file edited:
``algo.name: ddpg:ALGORITHM``, run from this folder.

Read top to bottom: the ``algo:`` section, the networks, how it acts while collecting, the update
(every line of it against the paper's Algorithm 1 and CleanRL's ``ddpg_continuous_action.py``),
the runner, and the ``Algorithm`` entry naming them all.
"""

from __future__ import annotations

import copy
import functools
import math
from typing import ClassVar

import gymnasium as gym
import torch
import torch.nn.functional as F
from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt
from torch import nn

from distrl.algos.flat_gradients import GradientSync, SeparateNetworks, polyak_update_
from distrl.algos.off_policy_config import OffPolicySection
from distrl.algos.registry import ENVS, Algorithm
from distrl.collect.base import CollectorInputs
from distrl.collect.rollout import ActionNoise
from distrl.collect.transitions import TransitionCollector
from distrl.config.run import RunConfig
from distrl.config.sections import ModelConfig
from distrl.errors import UserError
from distrl.io.train_state import ModuleTrainState, SavedState, TrainState
from distrl.models.actor_critic import mlp
from distrl.runners.base import RunContext, start_rank_envs
from distrl.runners.replay import ReplayRunner
from distrl.storage.replay import TransitionBatch
from distrl.timing import PhaseClock

# ----------------------------------------------------------------------------- the algo: section


class DDPGConfig(OffPolicySection):
    """DDPG's keys at CleanRL's defaults; the replay loop's (rollout_steps, gradient_steps,
    batch_size, buffer_size, learning_starts, gamma) come from ``OffPolicySection``, given
    DDPG's defaults here. Sizes are summed over all ranks."""

    resume_fixed_keys: ClassVar[tuple[str, ...]] = ("model.activation",)  # what the weights compute

    rollout_steps: PositiveInt = 1
    """Env steps per env between rounds of gradient steps."""
    gradient_steps: PositiveInt = 1
    """Gradient steps (of the critic and of the actor) per round."""
    batch_size: PositiveInt = 256
    """Samples per gradient step over all ranks, each rank drawing its share from its own buffer."""
    buffer_size: PositiveInt = 1_000_000
    """Transitions kept over all ranks (each rank keeps the newest of its own envs)."""
    learning_starts: NonNegativeInt = 25_000
    """Global env steps of uniformly random actions before the first gradient step."""
    learning_rate: PositiveFloat = 3e-4
    """Adam's learning rate, the critic's and the actor's (CleanRL's)."""
    tau: float = Field(0.005, gt=0.0, le=1.0)
    """Polyak step of both targets towards their networks after every gradient step."""
    exploration_noise: PositiveFloat = 0.1
    """Std of the Gaussian added to mu(s) while collecting, in half-widths of the action bounds."""
    max_grad_norm: PositiveFloat | None = None
    """Clip each network's gradient norm (unset: no clipping, as the paper and CleanRL)."""
    adam_eps: PositiveFloat = 1e-8


# ----------------------------------------------------------------------------- the networks


class Actor(nn.Module):
    """mu(s): an MLP whose tanh output is scaled to the env's bounds, so it acts in the env's units
    and is itself the deployable policy (raw observation in, env action out)."""

    def __init__(self, observation_space: gym.Space, action_space: gym.spaces.Box, cfg: ModelConfig) -> None:
        super().__init__()
        obs_dim, self.action_dim = int(observation_space.shape[0]), int(action_space.shape[0])
        # model.hidden_sizes and model.activation; torch's default initialisation (out_gain None).
        self.net = mlp(obs_dim, cfg.hidden_sizes, self.action_dim, cfg.activation, out_gain=None)
        low = torch.tensor(action_space.low, dtype=torch.float32)  # a copy: the space may be read-only
        high = torch.tensor(action_space.high, dtype=torch.float32)
        # Buffers: saved with the weights, moved with the module, identical on every rank.
        self.register_buffer("action_scale", (high - low) / 2)
        self.register_buffer("action_bias", (high + low) / 2)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs)) * self.action_scale + self.action_bias


class Critic(nn.Module):
    """Q(s, a) on the observation and the env's action."""

    def __init__(self, observation_space: gym.Space, action_dim: int, cfg: ModelConfig) -> None:
        super().__init__()
        obs_dim = int(observation_space.shape[0])
        self.net = mlp(obs_dim + action_dim, cfg.hidden_sizes, 1, cfg.activation, out_gain=None)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, actions], dim=-1)).squeeze(-1)


# ----------------------------------------------------------------------------- acting while collecting


class GaussianExploration(nn.Module):
    """The behaviour policy: mu(s) + N(0, (exploration_noise x half-width)^2), clipped to the
    bounds; or, with ``exploration`` 1 (before ``learning_starts``), uniform in the bounds. Both
    come from ``noise``, one standard normal per env and action dimension drawn by the rank's
    ``ActionNoise``, so env workers acting on parts of a rank's envs act exactly as the rank would."""

    def __init__(self, actor: Actor, noise_std: float) -> None:
        super().__init__()
        self.actor = actor
        self.noise_std = noise_std

    def forward(
        self, obs: torch.Tensor, noise: torch.Tensor, exploration: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Env actions and their log-densities (what importance weights would divide by; DDPG's
        update reads none)."""
        scale, bias = self.actor.action_scale, self.actor.action_bias
        if exploration >= 1.0:
            unit = torch.special.erf(noise / math.sqrt(2.0))  # 2 Phi(z) - 1: uniform in (-1, 1)
            log_probs = (-torch.log(2 * scale)).sum().expand(len(obs))
            return bias + scale * unit, log_probs
        std = self.noise_std * scale
        actions = self.actor(obs) + std * noise
        # The Gaussian's density before clipping, per env.
        log_probs = (-0.5 * noise**2 - torch.log(std) - 0.5 * math.log(2 * math.pi)).sum(-1)
        return actions.clamp(bias - scale, bias + scale), log_probs


def ddpg_collector(inputs: CollectorInputs) -> TransitionCollector:
    """``Algorithm.collector``: steps ``inputs.env`` with the exploring ``actor`` of
    ``inputs.modules`` (the rank's live one, or an env worker's copy)."""
    actor = inputs.modules["actor"]
    noise = ActionNoise(
        (inputs.noise_rows, actor.action_dim), True, inputs.noise_seed, inputs.part, inputs.device
    )
    exploring = GaussianExploration(actor, inputs.cfg.algo.exploration_noise)
    return TransitionCollector(inputs.cfg, inputs.env, exploring, noise, inputs.device, inputs.clock)


def actor_copies(
    cfg: RunConfig, observation_space: gym.Space, action_space: gym.Space, device: torch.device
) -> dict[str, nn.Module]:
    """``Algorithm.acting``: a fresh actor, which env workers and collector processes load each
    policy version's weights into (by its checkpoint name, ``actor``)."""
    return {"actor": Actor(observation_space, action_space, cfg.model).to(device)}


# ----------------------------------------------------------------------------- the update


class DDPG:
    """One gradient step = a critic step, an actor step, then both targets' Polyak step. Each loss
    is a mean over this rank's share of the global batch; ``SeparateNetworks`` averages each
    gradient over the ranks (weighted by their shares) through ``gradient_sync`` before Adam
    steps, so every rank takes the same steps and its targets stay identical."""

    def __init__(
        self, actor: Actor, critic: Critic, cfg: DDPGConfig, gradient_sync: GradientSync, clock: PhaseClock
    ) -> None:
        self.actor, self.critic, self.cfg, self.clock = actor, critic, cfg, clock
        # mu' and Q' start as copies of mu and Q (Algorithm 1), never trained by the optimiser.
        self.actor_target = copy.deepcopy(actor).requires_grad_(False)
        self.critic_target = copy.deepcopy(critic).requires_grad_(False)
        self.networks = SeparateNetworks(
            {"critic": critic, "actor": actor},
            cfg.learning_rate,
            cfg.adam_eps,
            cfg.max_grad_norm,
            gradient_sync,
            clock,
        )

    def set_learning_rate(self, lr: float) -> None:
        self.networks.set_learning_rate(lr)

    def gradient_step(self, batch: TransitionBatch) -> dict[str, float]:
        rows = len(batch)
        with self.clock("forward"):
            with torch.no_grad():
                # y = r + gamma Q'(s', mu'(s')), with no bootstrap from a terminal s'. ``returns`` is
                # the one reward r: the replay loop's ``n_step`` is 1.
                next_q = self.critic_target(batch.next_obs, self.actor_target(batch.next_obs))
                y = batch.returns + self.cfg.gamma * (~batch.terminated) * next_q
            # L = mean (y - Q(s, a))^2
            q = self.critic(batch.obs, batch.actions)
            critic_loss = F.mse_loss(q, y)
        critic_norm = self.networks.step("critic", critic_loss, rows)
        with self.clock("forward"):
            # The deterministic policy gradient: ascend Q(s, mu(s)) (only the actor's weights step).
            actor_loss = -self.critic(batch.obs, self.actor(batch.obs)).mean()
        actor_norm = self.networks.step("actor", actor_loss, rows)
        # theta' <- tau theta + (1 - tau) theta'
        polyak_update_(self.critic_target, self.critic, self.cfg.tau)
        polyak_update_(self.actor_target, self.actor, self.cfg.tau)
        return {
            "critic_loss": float(critic_loss.detach()),
            "actor_loss": float(actor_loss.detach()),
            "q_mean": float(q.detach().mean()),
            "grad_norm/critic": critic_norm,
            "grad_norm/actor": actor_norm,
            # A non-finite gradient on any rank made every rank skip that step (NaN norm).
            "skipped_steps": float(math.isnan(critic_norm) or math.isnan(actor_norm)),
        }


# ----------------------------------------------------------------------------- the runner


class DDPGRunner(ReplayRunner):
    """distrl's replay loop (collect ``rollout_steps`` per env into each rank's buffer, then
    ``gradient_steps`` steps on global batches) with DDPG's networks, acting and update."""

    algorithm = "ddpg"
    exploration_metric = "random_actions"

    def __init__(self, ctx: RunContext) -> None:
        cfg, comm, device = ctx.cfg, ctx.comm, ctx.device
        if cfg.normalize.observations or cfg.normalize.rewards:
            raise UserError("normalize.observations and normalize.rewards are PPO's: set them false for ddpg")
        rank_envs = start_rank_envs(ctx)  # seeds this rank, builds its envs (or its env workers')
        obs_space, action_space = rank_envs.observation_space, rank_envs.action_space
        if not isinstance(action_space, gym.spaces.Box) or len(action_space.shape) != 1:
            raise UserError(f"env {cfg.env.id!r}: ddpg needs a Box of continuous actions, not {action_space}")
        if len(obs_space.shape) != 1:
            raise UserError(f"env {cfg.env.id!r}: ddpg's MLPs need flat observations, not {obs_space}")
        self.observation_space, self.action_space = obs_space, action_space
        self.actor = Actor(obs_space, action_space, cfg.model).to(device)
        self.critic = Critic(obs_space, self.actor.action_dim, cfg.model).to(device)
        for network in (self.actor, self.critic):
            comm.broadcast_parameters_(network)  # every rank starts from rank 0's weights
        sync = functools.partial(comm.sum_gradients_, clock=ctx.clock)
        self.algo = DDPG(self.actor, self.critic, cfg.algo, sync, ctx.clock)
        self.start_replay(ctx, rank_envs, {"actor": self.actor}, torch.float32)

    def exploration(self, global_step: int) -> float:
        """1 (uniformly random actions) until ``learning_starts`` global env steps, then 0."""
        return 1.0 if global_step < self.cfg.algo.learning_starts else 0.0

    def train_state(self) -> TrainState:
        """What a checkpoint holds, by name; ``actor`` is what ``ddpg_policy`` reads back."""
        return ModuleTrainState(
            self.algorithm,
            self.observation_space,
            self.action_space,
            {
                "actor": self.actor,
                "critic": self.critic,
                "actor_target": self.algo.actor_target,
                "critic_target": self.algo.critic_target,
            },
            self.algo.networks.optimizers,
        )

    def deployable_policy(self) -> nn.Module:
        return self.actor


def ddpg_policy(cfg: RunConfig, saved: SavedState) -> nn.Module:
    """``Algorithm.deployable_policy``: the actor of a checkpoint, for ``distrl eval``/``export``."""
    actor = Actor(saved.observation_space, saved.action_space, cfg.model)
    actor.load_state_dict(saved.module_tensors("actor"))
    return actor


# ----------------------------------------------------------------------------- the entry

# References are "module:attribute" strings; __name__ keeps them right if this file is renamed.
ALGORITHM = Algorithm(
    "ddpg",
    DDPGConfig,
    deployable_policy=f"{__name__}:ddpg_policy",
    runners={ENVS: f"{__name__}:DDPGRunner"},
    collector=f"{__name__}:ddpg_collector",
    acting=f"{__name__}:actor_copies",
)
