"""DD-PPO's runner: every rank collects with its own envs and policy copy, gradients are
averaged across ranks, and after each update all ranks hold identical parameters.

``iteration()`` reads as the algorithm: collect -> compute returns -> update; the shared loop
(``distrl.runners.loop``) logs, checks stop rules and checkpoints around it.
"""

from __future__ import annotations

import math
import time

import gymnasium as gym
import torch
from torch import nn

from distrl.algos.ppo import PPO, minibatches_per_epoch
from distrl.config import RunConfig
from distrl.errors import UserError
from distrl.io import checkpoint as ckpt
from distrl.io.train_state import ModuleTrainState, SavedState, TrainState
from distrl.models.actor_critic import ActorCritic, DeterministicActor
from distrl.models.normalizer import RunningMeanStd, batch_moments
from distrl.runners.base import IterationResult, RunContext, Runner, rank_envs, scheduled_learning_rate
from distrl.runners.episodes import EpisodeTracker
from distrl.runners.straggler import StragglerCutoff
from distrl.sharding import EnvShard
from distrl.storage.rollout import RolloutStorage
from distrl.timing import phase


def uses_obs_normalization(cfg: RunConfig, action_space: gym.spaces.Space) -> bool:
    """Explicit setting wins; by default normalise observations for continuous control only."""
    if cfg.normalize.observations is not None:
        return cfg.normalize.observations
    return isinstance(action_space, gym.spaces.Box)


def _finite(obs: torch.Tensor) -> torch.Tensor:
    """Non-finite entries zeroed, so they never reach the policy or the normalisers."""
    return torch.nan_to_num(obs, nan=0.0, posinf=0.0, neginf=0.0)


def advantage_sums(advantages: torch.Tensor) -> list[float]:
    """(count, sum, sum of squares) in float64: summed over ranks, they give the global mean and
    variance in the same collective as the update's other per-rank numbers."""
    adv = advantages.double()
    return [float(adv.numel()), float(adv.sum()), float((adv * adv).sum())]


def normalize_advantages(
    advantages: torch.Tensor, count: float, total: float, total_sq: float
) -> torch.Tensor:
    """Standardise with the mean/std of the whole global rollout (from the summed
    ``advantage_sums``), so N ranks match one batch. One-pass float64 moments lose precision
    only when |mean| / std nears 1e8, far from what GAE advantages do."""
    mean = total / count
    std = math.sqrt(max(total_sq - count * mean * mean, 0.0) / max(count - 1.0, 1.0))
    return ((advantages - mean) / (std + 1e-8)).reshape(-1)


def minibatches_per_rank(cfg: RunConfig, envs: EnvShard, world_size: int) -> int:
    """Parts each rank splits its rollout into per epoch, by the size rule (README, "Adding
    ranks"): the global minibatch stays ``minibatch_size`` however many ranks there are, so each
    rank's share of a minibatch shrinks as ranks grow."""
    rollout = cfg.algo.rollout_steps
    count = minibatches_per_epoch(cfg.algo, rollout * envs.global_count)
    smallest_rank_batch = rollout * envs.min_count
    if count > smallest_rank_batch:
        raise UserError(
            f"algo.minibatch_size={cfg.algo.minibatch_size} gives {count} minibatches per epoch, "
            f"more than the {smallest_rank_batch} samples a rank collects per update; raise it to at "
            f"least {world_size}"
        )
    return count


def deterministic_actor(
    cfg: RunConfig,
    observation_space: gym.spaces.Space,
    action_space: gym.spaces.Space,
    model_tensors: dict[str, torch.Tensor],
) -> DeterministicActor:
    """The deployable policy held by checkpoint-named tensors (``policy.*``, and ``obs_rms.*``
    when observations were normalised), whichever learner wrote them."""
    policy = ActorCritic(observation_space.shape[0], action_space, cfg.model)
    policy.load_state_dict(ckpt.strip_prefix(model_tensors, "policy."))
    obs_rms = None
    if rms_tensors := ckpt.strip_prefix(model_tensors, "obs_rms."):
        obs_rms = RunningMeanStd(observation_space.shape)
        obs_rms.load_state_dict(rms_tensors)
    return DeterministicActor(policy, obs_rms, cfg.normalize.clip, action_space)


class OnPolicyRunner(Runner):
    algorithm = "ppo"

    def __init__(self, ctx: RunContext) -> None:
        cfg, comm, device = ctx.cfg, ctx.comm, ctx.device
        self.cfg = cfg
        self.comm = comm
        self.device = device
        self.envs, self.env = rank_envs(ctx)
        self.num_envs = self.envs.count
        self.steps_per_update = cfg.algo.rollout_steps * self.envs.global_count
        obs_dim = self.env.observation_space.shape[0]
        self.policy = ActorCritic(obs_dim, self.env.action_space, cfg.model).to(device)
        comm.broadcast_parameters_(self.policy)
        self.obs_rms = (
            RunningMeanStd((obs_dim,)).to(device)
            if uses_obs_normalization(cfg, self.env.action_space)
            else None
        )
        self.return_rms = RunningMeanStd(()).to(device) if cfg.normalize.rewards else None
        self.algo = PPO(
            self.policy,
            cfg.algo,
            num_minibatches=minibatches_per_rank(cfg, self.envs, comm.world_size),
            gradient_sync=comm.sum_gradients_,
        )
        continuous = self.policy.continuous
        self.storage = RolloutStorage(
            cfg.algo.rollout_steps,
            self.num_envs,
            obs_dim,
            self.env.action_space.shape if continuous else (),
            torch.float32 if continuous else torch.int64,
            device,
        )
        # Everything the rollout touches lives on the rank's device (a torch env's own).
        steps = cfg.algo.rollout_steps
        self.raw_obs = torch.zeros((steps, self.num_envs, obs_dim), device=device)
        self.discounted_return = torch.zeros(self.num_envs, dtype=torch.float64, device=device)
        self.raw_returns = torch.zeros((steps, self.num_envs), dtype=torch.float64, device=device)
        self.episodes = EpisodeTracker(self.num_envs, cfg.train.return_window, device)
        self.stragglers = StragglerCutoff(
            comm,
            cfg.train.straggler_threshold,
            cfg.algo.rollout_steps,
            min_steps=math.ceil(self.algo.num_minibatches / self.num_envs),
        )
        self.nonfinite_final_obs = False
        """A final observation (bootstrapping a truncation) this rollout was not finite; non-finite
        observations acted on are found in ``raw_obs`` by the update."""
        self.action_bounds = self._action_bounds()
        self.rollouts = 0
        """Rollouts collected in this launch: names each one's straggler count in the store."""
        self.obs: torch.Tensor | None = None
        """The observation the next rollout starts from."""

    # ----------------------------------------------------------------------------- the runner
    def start(self, fresh: bool) -> None:
        self.obs = self.env.reset().to(self.device)
        if fresh:
            self._update_obs_stats(_finite(self.obs))

    def iteration(self, global_step: int) -> IterationResult:
        start = time.perf_counter()
        lr = scheduled_learning_rate(self.cfg, global_step)
        self.algo.set_learning_rate(lr)
        self.obs, last_values = self.collect(self.obs)
        local_steps = self.storage.step * self.num_envs
        collect_s = time.perf_counter() - start
        losses, collected = self.update(last_values)
        skipped = losses.pop("skipped_minibatches")
        return IterationResult(
            env_steps=collected,
            averaged={**losses, "collect_share": collect_s / (time.perf_counter() - start)},
            replicated={
                "learning_rate": lr,
                "skipped_minibatches": skipped,
                "rollout_fraction": collected / self.steps_per_update,
            },
            episodes=self.episodes.stats(),
            local_steps=local_steps,
            skipped=skipped > 0,
        )

    def train_state(self) -> TrainState:
        modules: dict[str, nn.Module] = {"policy": self.policy}
        for name, rms in (("obs_rms", self.obs_rms), ("return_rms", self.return_rms)):
            if rms is not None:
                modules[name] = rms
        return ModuleTrainState(
            self.algorithm,
            self.env.observation_space,
            self.env.action_space,
            modules,
            {"policy": self.algo.optimizer},
        )

    def deployable_policy(self) -> nn.Module:
        return DeterministicActor(self.policy, self.obs_rms, self.cfg.normalize.clip, self.env.action_space)

    @classmethod
    def policy_from_checkpoint(cls, cfg: RunConfig, saved: SavedState) -> nn.Module:
        return deterministic_actor(cfg, saved.observation_space, saved.action_space, saved.tensors)

    def close(self) -> None:
        self.env.close()

    def update(self, last_values: torch.Tensor) -> tuple[dict[str, float], int]:
        """Merge the rollout into the normalisers, then GAE, advantage normalisation and the PPO
        epochs; return the loss statistics and the env steps collected by all ranks. A rollout
        that saw a non-finite observation on any rank is skipped by all ranks and touches
        neither the normalisers nor the weights."""
        steps = self.storage.step  # fewer than rollout_steps when a straggler was cut short
        with phase("returns"):
            batch = self.storage.batch(last_values, self.cfg.algo.gamma, self.cfg.algo.gae_lambda)
        # One sum carries what the update needs from every rank: a non-finite observation
        # anywhere, the samples collected, and the advantages' global moments.
        nonfinite_obs = self.nonfinite_final_obs or not torch.isfinite(self.raw_obs[:steps]).all()
        local = [float(nonfinite_obs), steps * self.num_envs, *advantage_sums(batch.advantages)]
        nonfinite_obs, collected, *adv_sums = self.comm.sum_scalars(local)
        self.stragglers.forget()  # every rank is past collecting: it reached the sum above
        self.nonfinite_final_obs = False
        if nonfinite_obs:
            skipped = float(self.cfg.algo.update_epochs * self.algo.num_minibatches)
            return {"skipped_minibatches": skipped}, int(collected)
        self._update_obs_stats(self.raw_obs[:steps].reshape(-1, self.raw_obs.shape[-1]))
        self._update_return_stats(steps)
        if self.cfg.algo.normalize_advantages:
            batch.advantages = normalize_advantages(batch.advantages, *adv_sums)
        return self.algo.update(batch), int(collected)

    # ----------------------------------------------------------------------------- collect
    def collect(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Fill the rollout buffer from this rank's envs (all ``rollout_steps`` unless the
        straggler cut-off stops it early); return the next obs and its values."""
        cfg = self.cfg
        gamma = cfg.algo.gamma
        self.rollouts += 1
        self.stragglers.begin(self.rollouts)
        for t in range(cfg.algo.rollout_steps):
            if self.stragglers.should_stop(t):
                break
            self.raw_obs[t] = obs  # as the env gave it: update() skips a rollout with non-finite ones
            obs_t = self._normalize_obs(_finite(obs))
            with phase("inference"):
                actions, log_probs, values = self.policy.act(obs_t)
            with phase("env"):
                result = self.env.step(self._to_env_actions(actions))
            reward, terminated, truncated = (x.to(self.device) for x in result[1:4])
            dones = terminated | truncated
            self.episodes.step(reward, dones)

            rewards = self._scale_rewards(reward, dones, t)
            # A truncated episode did not end in the MDP: bootstrap from its final observation.
            if truncated.any():
                with torch.no_grad(), phase("inference"):
                    final_obs = result.final_obs.to(self.device)
                    # A host check, in the rare branch that synchronised for truncated.any() anyway.
                    self.nonfinite_final_obs |= not torch.isfinite(final_obs).all()
                    final_values = self.policy.value(self._normalize_obs(_finite(final_obs)))
                rewards = rewards + gamma * final_values * (truncated & ~terminated)
            self.storage.add(obs_t, actions, log_probs, values, rewards, dones)
            obs = result.obs.to(self.device)
        self.stragglers.finish()
        with torch.no_grad(), phase("inference"):
            last_values = self.policy.value(self._normalize_obs(_finite(obs)))
        return obs, last_values

    def _action_bounds(self) -> tuple[torch.Tensor, torch.Tensor] | None:
        space = self.env.action_space
        if not isinstance(space, gym.spaces.Box):
            return None
        return (
            torch.as_tensor(space.low, dtype=torch.float32, device=self.device),
            torch.as_tensor(space.high, dtype=torch.float32, device=self.device),
        )

    def _to_env_actions(self, actions: torch.Tensor) -> torch.Tensor:
        if self.action_bounds is not None:
            # Sample stays unclipped in the buffer (its log-prob is exact); the env gets it clipped.
            actions = torch.clamp(actions, *self.action_bounds)
        return actions.to(self.env.device)

    # ----------------------------------------------------------------------------- normalisers
    def _normalize_obs(self, obs: torch.Tensor) -> torch.Tensor:
        if self.obs_rms is None:
            return obs
        return self.obs_rms.normalize(obs, self.cfg.normalize.clip)

    def _update_obs_stats(self, raw_obs: torch.Tensor) -> None:
        """Merge this update's observations from all ranks into the shared statistics."""
        if self.obs_rms is not None:
            self.obs_rms.update_from_moments(*self.comm.merge_moments(*batch_moments(raw_obs)))

    def _scale_rewards(self, rewards: torch.Tensor, dones: torch.Tensor, t: int) -> torch.Tensor:
        if self.return_rms is None:
            return rewards
        self.discounted_return = self.discounted_return * self.cfg.algo.gamma + rewards
        self.raw_returns[t] = self.discounted_return
        self.discounted_return.masked_fill_(dones, 0.0)
        return self.return_rms.scale(rewards, self.cfg.normalize.clip)

    def _update_return_stats(self, steps: int) -> None:
        if self.return_rms is not None:
            moments = batch_moments(self.raw_returns[:steps].reshape(-1))
            self.return_rms.update_from_moments(*self.comm.merge_moments(*moments))
