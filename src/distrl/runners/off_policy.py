"""Online DQN's runner: every rank steps its own envs epsilon-greedily into its own replay buffer
and draws its share of every global batch from it; gradients are averaged across ranks exactly
as in DD-PPO, so all ranks hold identical online and target networks.

``iteration()`` reads as the algorithm: collect ``rollout_steps`` steps per env -> (once
``learning_starts`` env steps are in) ``gradient_steps`` gradient steps.
"""

from __future__ import annotations

import functools
import math
import time

import gymnasium as gym
from torch import nn

from distrl.algos.dqn import DQN
from distrl.collect.rollout import TransitionSource
from distrl.collect.transitions import TransitionCollector, exploration_noise
from distrl.envs.base import obs_tensor_dtype
from distrl.errors import UserError
from distrl.io.train_state import ModuleTrainState, TrainState
from distrl.models.policies import greedy_policy, make_q_network
from distrl.runners.base import IterationResult, RunContext, Runner, scheduled_learning_rate, start_rank_envs
from distrl.runners.episodes import EpisodeTracker
from distrl.sharding import even_split
from distrl.storage.replay import ReplayBuffer


class QLearningRunner(Runner):
    """What online and offline DQN share: the Q-network and its learner, checkpoint contents, and
    the greedy policy."""

    algorithm = "dqn"

    def __init__(
        self, ctx: RunContext, observation_space: gym.spaces.Box, action_space: gym.spaces.Space
    ) -> None:
        cfg, comm = ctx.cfg, ctx.comm
        if cfg.normalize.observations or cfg.normalize.rewards:
            raise UserError("normalize.observations and normalize.rewards are PPO's: set them false for dqn")
        if cfg.algo.batch_size < comm.world_size:
            raise UserError(
                f"algo.batch_size={cfg.algo.batch_size} counts samples over all ranks and is fewer than the "
                f"{comm.world_size} ranks; every rank needs at least one sample per gradient step: "
                f"raise it to at least {comm.world_size}"
            )
        self.cfg = cfg
        self.device = ctx.device
        self.observation_space, self.action_space = observation_space, action_space
        self.q_network = make_q_network(cfg, observation_space, action_space, ctx.device)
        comm.broadcast_parameters_(self.q_network)
        self.clock = ctx.clock
        sync = functools.partial(comm.sum_gradients_, clock=ctx.clock)
        self.algo = DQN(self.q_network, cfg.algo, gradient_sync=sync, clock=ctx.clock)
        self.batch_share = even_split(cfg.algo.batch_size, comm.rank, comm.world_size)[1]

    def train_state(self) -> TrainState:
        return ModuleTrainState(
            self.algorithm,
            self.observation_space,
            self.action_space,
            {"q_network": self.q_network, "target_network": self.algo.target_network},
            {"q_network": self.algo.optimizer},
        )

    def deployable_policy(self) -> nn.Module:
        return greedy_policy(self.q_network)

    def rank_state(self) -> dict[str, int]:
        # The target network's update cadence counts gradient steps across launches.
        return {"gradient_steps_done": self.algo.gradient_steps_done}

    def load_rank_state(self, state: dict[str, int]) -> None:
        self.algo.gradient_steps_done = state.get("gradient_steps_done", 0)

    def set_learning_rate(self, global_step: int) -> float:
        lr = scheduled_learning_rate(self.cfg, global_step)
        self.algo.set_learning_rate(lr)
        return lr


class OffPolicyRunner(QLearningRunner):
    def __init__(self, ctx: RunContext) -> None:
        cfg, device = ctx.cfg, ctx.device
        rank_envs = start_rank_envs(ctx)
        self.envs = rank_envs.shard
        observation_space, action_space = rank_envs.observation_space, rank_envs.action_space
        if not isinstance(action_space, gym.spaces.Discrete):
            raise UserError(
                f"env {cfg.env.id!r}: dqn needs Discrete actions, not {action_space}; "
                "algo.name=ppo trains on it"
            )
        super().__init__(ctx, observation_space, action_space)
        self.collection: TransitionSource
        if rank_envs.env is not None:
            exploration = exploration_noise(rank_envs.noise_seed, self.envs.count, slice(None), device)
            self.collection = TransitionCollector(
                cfg, rank_envs.env, self.q_network, exploration, device, ctx.clock
            )
        else:
            self.collection = ctx.workers.env.acting({"q_network": self.q_network}, device)
        # The buffer keeps buffer_size transitions over all ranks: the same history per env.
        capacity = max(math.ceil(cfg.algo.buffer_size / self.envs.global_count), cfg.algo.n_step)
        self.replay = ReplayBuffer(
            capacity, self.envs.count, observation_space.shape, device, obs_tensor_dtype(observation_space)
        )
        self.steps_per_iteration = cfg.algo.rollout_steps * self.envs.global_count
        self.episodes = EpisodeTracker(self.envs.count, cfg.train.return_window, device)

    # ----------------------------------------------------------------------------- the runner
    def start(self, fresh: bool) -> None:
        self.collection.reset()

    def iteration(self, global_step: int) -> IterationResult:
        start = time.perf_counter()
        lr = self.set_learning_rate(global_step)
        epsilon = self.epsilon(global_step)
        self.collect(epsilon)
        collect_s = time.perf_counter() - start
        stats: dict[str, float] = {}
        if global_step + self.steps_per_iteration >= self.cfg.algo.learning_starts:
            stats = self.learn()
        skipped = stats.pop("skipped_steps", 0.0)
        return IterationResult(
            env_steps=self.steps_per_iteration,
            local_steps=self.cfg.algo.rollout_steps * self.envs.count,
            averaged={
                **stats,
                "collect_share": collect_s / (time.perf_counter() - start),
            },
            replicated={"learning_rate": lr, "epsilon": epsilon, "skipped_steps": skipped},
            counted=self.collection.counts(),
            episodes=self.episodes.stats(),
            skipped=skipped > 0,
        )

    def close(self) -> None:
        self.collection.close()

    # ----------------------------------------------------------------------------- collect, learn
    def collect(self, epsilon: float) -> None:
        """``rollout_steps`` epsilon-greedy steps of every env into the replay buffer."""
        segment = self.collection.collect(epsilon)
        self.episodes.add_rollout(segment.env_rewards, segment.episode_ends, segment.restarted)
        self.replay.cut(segment.restarted)
        for t in range(segment.steps):
            self.replay.add(
                segment.obs[t],
                segment.actions[t],
                segment.rewards[t],
                segment.next_obs[t],
                segment.terminated[t],
                segment.ended[t],
            )

    def learn(self) -> dict[str, float]:
        """``gradient_steps`` steps, each on this rank's share of a global batch; mean statistics."""
        cfg = self.cfg.algo
        totals: dict[str, float] = {}
        for _ in range(cfg.gradient_steps):
            with self.clock("replay"):
                batch = self.replay.sample(self.batch_share, cfg.n_step, cfg.gamma)
            for key, value in self.algo.gradient_step(batch).items():
                totals[key] = totals.get(key, 0.0) + value
        skipped = totals.pop("skipped_steps")
        return {"skipped_steps": skipped, **{k: v / cfg.gradient_steps for k, v in totals.items()}}

    def epsilon(self, global_step: int) -> float:
        """Linear from ``exploration_initial_eps`` to ``exploration_final_eps`` over the first
        ``exploration_fraction`` of ``train.total_steps`` (global steps: the same on every rank)."""
        cfg = self.cfg.algo
        progress = min(global_step / (cfg.exploration_fraction * self.cfg.train.total_steps), 1.0)
        return cfg.exploration_initial_eps + progress * (
            cfg.exploration_final_eps - cfg.exploration_initial_eps
        )
