"""PPO with a JAX learner (``ml_framework: jax``): the envs of ``env.backend`` step on the host
as for torch; acting is one compiled call per step, and GAE plus every epoch and minibatch of
the update is one compiled call per rollout, summing gradients over the processes' mesh.

``JaxPPOLearner`` is what every JAX runner shares (parameters, optimiser state, the compiled
update, checkpoints in torch's tensor names, a torch copy of the policy to evaluate and
export); ``JaxOnPolicyRunner`` adds the host envs.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import torch
from jax.sharding import PartitionSpec as P
from torch import nn

from distrl.algos.ppo_jax import ActorCritic, JaxPPO, PPOStats, Rollout, sample_actions
from distrl.comm.jax_comm import AXIS, JaxComm, as_row, own_row
from distrl.envs.dict_obs import PackedDict
from distrl.errors import UserError
from distrl.io.train_state import TrainState
from distrl.models.policies import deterministic_actor
from distrl.runners.base import (
    EpisodeStats,
    IterationResult,
    RunContext,
    Runner,
    rank_envs,
    scheduled_learning_rate,
)
from distrl.runners.episodes import EpisodeTracker
from distrl.runners.on_policy import minibatches_per_rank
from distrl.seeding import rank_seed
from distrl.sharding import EnvShard

if TYPE_CHECKING:
    from distrl.config.run import RunConfig


def check_jax_config(cfg: RunConfig, envs: EnvShard) -> None:
    """What the JAX learner does not do (yet), as one line before anything is built."""
    unsupported = {
        "normalize.observations": cfg.normalize.observations,
        "normalize.rewards": cfg.normalize.rewards,
        "normalize.clip_rewards": cfg.normalize.clip_rewards,
        "train.straggler_threshold": cfg.train.straggler_threshold is not None,
    }
    for key, value in unsupported.items():
        if value:
            raise UserError(
                f"{key} is not supported with ml_framework: jax yet; unset it or use torch",
                code="jax-setting-unsupported",
            )
    if envs.min_count != envs.count or envs.global_count % envs.count:
        raise UserError(
            f"ml_framework: jax needs the same number of envs on every process: env.num_envs="
            f"{envs.global_count} does not divide by the processes; use a multiple or env.num_envs_per_rank",
            code="jax-envs-uneven",
        )


def _finite(obs: np.ndarray) -> np.ndarray:
    """Non-finite entries zeroed, as the torch runner does, before the policy sees them."""
    return np.nan_to_num(obs, nan=0.0, posinf=0.0, neginf=0.0)


def _torch_name(path: tuple[Any, ...]) -> str:
    """Flax's ``actor/0/kernel`` -> torch's ``actor.0.weight`` (bias and log_std keep their names)."""
    keys = [str(getattr(k, "key", k)) for k in path][1:]  # drop the top-level "params"
    if keys[-1] == "kernel":
        keys[-1] = "weight"
    return ".".join(keys)


def _swap_layout(name: str, array: np.ndarray) -> np.ndarray:
    """A Dense kernel ``[in, out]`` <-> an ``nn.Linear`` weight ``[out, in]`` (its own inverse);
    other arrays as they are."""
    return array.T if name.endswith("weight") else array


class JaxTrainState(TrainState):
    """The JAX learner's parameters and Optax state, as the checkpoint's torch-named tensors:
    Dense kernels transposed into ``nn.Linear`` weights, so torch reads them unchanged."""

    def __init__(self, learner: JaxPPOLearner) -> None:
        self.learner = learner
        self.algorithm = "ppo"
        self.observation_space = learner.observation_space
        self.action_space = learner.action_space

    def model_tensors(self) -> dict[str, torch.Tensor]:
        out = {}
        for path, leaf in jax.tree_util.tree_flatten_with_path(self.learner.params)[0]:
            name = _torch_name(path)
            out[f"policy.{name}"] = torch.from_numpy(_swap_layout(name, np.asarray(leaf)).copy())
        return out

    def optimizer_state(self) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        leaves = jax.tree_util.tree_flatten_with_path(self.learner.opt_state)[0]
        tensors = {f"policy.{jax.tree_util.keystr(p)}": torch.from_numpy(np.array(v)) for p, v in leaves}
        return tensors, {"policy": {"framework": "jax", "optimizer": "optax.adam"}}

    def load(
        self, model: dict[str, torch.Tensor], optimizer: dict[str, torch.Tensor], settings: dict[str, Any]
    ) -> None:
        if settings.get("policy", {}).get("framework") != "jax":
            raise UserError(
                "the checkpoint to resume was written by the torch learner; resume it with torch",
                code="jax-resume-torch-checkpoint",
            )

        def restored(path, leaf):
            name = _torch_name(path)
            return jnp.asarray(_swap_layout(name, model[f"policy.{name}"].numpy()), leaf.dtype)

        learner = self.learner
        learner.params = jax.tree_util.tree_map_with_path(restored, learner.params)
        learner.opt_state = jax.tree_util.tree_map_with_path(
            lambda p, leaf: jnp.asarray(optimizer[f"policy.{jax.tree_util.keystr(p)}"].numpy(), leaf.dtype),
            learner.opt_state,
        )


class JaxPPOLearner:
    """Parameters (the same on every process: initialised from ``train.seed`` alone), the Optax
    state and PPO's compiled update on the communicator's mesh."""

    def __init__(
        self,
        cfg: RunConfig,
        comm: JaxComm,
        observation_space: gym.spaces.Space,
        action_space: gym.spaces.Space,
        num_minibatches: int,
    ) -> None:
        self.cfg = cfg
        self.comm = comm
        if len(observation_space.shape) != 1 or isinstance(observation_space, PackedDict):
            raise UserError(
                f"ml_framework: jax trains on feature vectors; observations {observation_space} (images "
                "or a Dict) need ml_framework: torch",
                code="jax-observation-space",
            )
        if not isinstance(action_space, gym.spaces.Discrete | gym.spaces.Box):
            raise UserError(
                f"ml_framework: jax acts in Discrete or Box spaces; {action_space} needs torch",
                code="jax-action-space",
            )
        self.observation_space = observation_space
        self.action_space = action_space
        continuous = isinstance(action_space, gym.spaces.Box)
        n_out = action_space.shape[0] if continuous else int(action_space.n)
        self.model = ActorCritic(n_out, continuous, cfg.model)
        self.algo = JaxPPO(self.model, cfg.algo, num_minibatches, axis_name=AXIS)
        obs = jnp.zeros((1, observation_space.shape[0]))
        self.params = self.model.init(jax.random.PRNGKey(cfg.train.seed), obs)
        self.opt_state = self.algo.optimizer.init(self.params)
        self.key = jax.random.PRNGKey(rank_seed(cfg.train.seed, comm.rank))
        """This rank's own stream: action sampling and minibatch order."""
        self._update = jax.jit(
            jax.shard_map(
                self._rank_update,
                mesh=comm.mesh,
                in_specs=(P(), P(), P(AXIS), P(AXIS), P(), P(AXIS), P(AXIS)),
                out_specs=(P(), P(), P(AXIS)),
            )
        )

    def _rank_update(self, params, opt_state, rollout, last_values, lr, key, skip):
        """One rank's view inside ``shard_map``: its row of every per-rank input."""
        rollout, last_values, key, skip = own_row((rollout, last_values, key, skip))
        params, opt_state, stats = self.algo.update(params, opt_state, rollout, last_values, lr, key, skip)
        return params, opt_state, as_row(stats)

    def update(self, rollout: Rollout, last_values: jax.Array, learning_rate: float, skip: bool) -> PPOStats:
        """PPO's update on this rank's rollout and every other rank's; returns this rank's
        loss statistics (the loop averages them over ranks)."""
        comm = self.comm
        self.key, update_key = jax.random.split(self.key)
        per_rank = comm.stack_ranks((rollout, last_values, update_key, jnp.asarray(skip)))
        params, opt_state = comm.replicate((self.params, self.opt_state))
        lr = comm.replicate(jnp.float32(learning_rate))
        params, opt_state, stats = self._update(
            params, opt_state, per_rank[0], per_rank[1], lr, *per_rank[2:]
        )
        self.params, self.opt_state = comm.local((params, opt_state))
        return jax.device_get(comm.own_rows(stats))

    def train_state(self) -> TrainState:
        return JaxTrainState(self)

    def rank_state(self) -> dict[str, Any]:
        return {"jax_key": np.asarray(self.key).tolist()}

    def load_rank_state(self, state: dict[str, Any]) -> None:
        if "jax_key" in state:
            self.key = jnp.asarray(state["jax_key"], jnp.uint32)

    def deployable_policy(self) -> nn.Module:
        """A torch copy of the current policy (for the stop check, ``output.path`` and export)."""
        tensors = self.train_state().model_tensors()
        return deterministic_actor(self.cfg, self.observation_space, self.action_space, tensors)


class JaxLearnerRunner(Runner):
    """What every runner with a ``JaxPPOLearner`` hands the loop: the learner's state."""

    algorithm = "ppo"
    cfg: RunConfig
    envs: EnvShard
    learner: JaxPPOLearner

    def _result(
        self, lr: float, stats: PPOStats, episodes: EpisodeStats, **averaged: float
    ) -> IterationResult:
        """An iteration's result from this rank's update statistics (every env stepped the
        whole rollout: JAX runners have no straggler cut-off)."""
        numbers = {k: float(v) for k, v in stats._asdict().items()}
        skipped = numbers.pop("skipped_minibatches")
        steps = self.cfg.algo.rollout_steps
        return IterationResult(
            env_steps=steps * self.envs.global_count,
            averaged={**numbers, **averaged},
            replicated={"learning_rate": lr, "skipped_minibatches": skipped, "rollout_fraction": 1.0},
            episodes=episodes,
            local_steps=steps * self.envs.count,
            skipped=skipped > 0,
        )

    def train_state(self) -> TrainState:
        return self.learner.train_state()

    def deployable_policy(self) -> nn.Module:
        return self.learner.deployable_policy()

    def rank_state(self) -> dict[str, Any]:
        return self.learner.rank_state()

    def load_rank_state(self, state: dict[str, Any]) -> None:
        self.learner.load_rank_state(state)


class JaxOnPolicyRunner(JaxLearnerRunner):
    """Host envs (any ``env.backend``), a JAX learner."""

    def __init__(self, ctx: RunContext) -> None:
        cfg, comm = ctx.cfg, ctx.comm
        self.clock = ctx.clock
        assert isinstance(comm, JaxComm), "ml_framework: jax runs on a JaxComm"
        self.cfg = cfg
        self.envs, self.env = rank_envs(ctx)
        check_jax_config(cfg, self.envs)
        self.num_envs = self.envs.count
        self.learner = JaxPPOLearner(
            cfg,
            comm,
            self.env.observation_space,
            self.env.action_space,
            minibatches_per_rank(cfg, self.envs, comm.world_size),
        )
        model = self.learner.model
        continuous = model.continuous

        def act(params, obs, key):
            key, sample_key = jax.random.split(key)
            out, log_std, values = model.apply(params, obs)
            return (*sample_actions(sample_key, out, log_std, continuous), values, key)

        self._act = jax.jit(act)
        self._value = jax.jit(lambda params, obs: model.apply(params, obs)[2])
        space = self.env.action_space
        self.action_bounds = (space.low, space.high) if continuous else None
        self.episodes = EpisodeTracker(self.num_envs, cfg.train.return_window, torch.device("cpu"))
        self.obs: np.ndarray | None = None

    def start(self, fresh: bool) -> None:
        self.obs = self.env.reset().cpu().numpy()

    def iteration(self, global_step: int) -> IterationResult:
        start = time.perf_counter()
        lr = scheduled_learning_rate(self.cfg, global_step)
        rollout, last_values, nonfinite = self.collect()
        collect_s = time.perf_counter() - start
        with self.clock("update"):
            stats = self.learner.update(rollout, last_values, lr, nonfinite)
        collect_share = collect_s / (time.perf_counter() - start)
        return self._result(lr, stats, self.episodes.stats(), collect_share=collect_share)

    def collect(self) -> tuple[Rollout, jax.Array, bool]:
        """One rollout from this rank's envs: (rollout, values of the next obs, whether any
        observation was not finite)."""
        steps, gamma = self.cfg.algo.rollout_steps, self.cfg.algo.gamma
        params = self.learner.params
        columns: dict[str, list] = {k: [] for k in Rollout._fields}
        nonfinite = False
        obs = self.obs
        for _ in range(steps):
            nonfinite |= not np.isfinite(obs).all()
            obs = _finite(obs)
            with self.clock("inference"):
                actions, log_probs, values, self.learner.key = self._act(params, obs, self.learner.key)
                env_actions = np.array(actions)  # writable: torch shares it
            if self.action_bounds is not None:
                env_actions = np.clip(env_actions, *self.action_bounds)
            with self.clock("env"):
                result = self.env.step(torch.from_numpy(env_actions))
            reward, terminated, truncated = (x.cpu() for x in result[1:4])
            dones = terminated | truncated
            self.episodes.step(reward, dones)
            rewards = reward.numpy().astype(np.float32)
            if truncated.any():  # bootstrap a time limit from the final observation
                final_obs = result.final_obs.cpu().numpy()
                nonfinite |= not np.isfinite(final_obs).all()
                with self.clock("inference"):
                    final_values = np.asarray(self._value(params, _finite(final_obs)))
                rewards = rewards + gamma * final_values * (truncated & ~terminated).numpy()
            for name, value in zip(
                Rollout._fields, (obs, actions, log_probs, values, rewards, dones.numpy()), strict=True
            ):
                columns[name].append(value)
            obs = result.obs.cpu().numpy()
        self.obs = obs
        with self.clock("inference"):
            last_values = self._value(params, _finite(obs))
        rollout = Rollout(**{k: jnp.stack([jnp.asarray(v) for v in vs]) for k, vs in columns.items()})
        return rollout._replace(dones=rollout.dones.astype(jnp.float32)), last_values, nonfinite

    def close(self) -> None:
        self.env.close()
