"""PPO on JAX-native envs (``ml_framework: jax`` with ``env.backend: gymnax`` or ``brax``): the
rollout (a ``lax.scan`` over policy and env steps), GAE and the whole update are one compiled call
per iteration and process, PureJaxRL's design. Env states, observations and keys stay on JAX's
device between iterations; only the loss statistics and episode sums come back to the host.

Across processes it is the same call under ``shard_map`` on the communicator's mesh: every
process steps its own envs, and the update sums gradients over the processes as in
``JaxOnPolicyRunner``, with which it shares the learner.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gymnasium as gym
import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import PartitionSpec as P

from distrl.algos.ppo_jax import Rollout, sample_actions
from distrl.comm.jax_comm import AXIS, JaxComm, as_row, own_row
from distrl.envs import make_vec_env
from distrl.envs.jax_envs import env_keys, split_keys, step_envs
from distrl.runners.base import EpisodeStats, IterationResult, RunContext, scheduled_learning_rate
from distrl.runners.jax_on_policy import JaxLearnerRunner, JaxPPOLearner, check_jax_config
from distrl.runners.on_policy import minibatches_per_rank
from distrl.seeding import env_seeds
from distrl.sharding import shard_envs


class EnvCarry(NamedTuple):
    """One process's envs between steps (and iterations)."""

    keys: jax.Array
    states: Any
    obs: jax.Array
    episode_return: jax.Array
    episode_length: jax.Array
    policy_key: jax.Array


class JaxCompiledRunner(JaxLearnerRunner):
    def __init__(self, ctx: RunContext) -> None:
        cfg, comm = ctx.cfg, ctx.comm
        self.clock = ctx.clock
        assert isinstance(comm, JaxComm), "ml_framework: jax runs on a JaxComm"
        self.cfg = cfg
        self.comm = comm
        self.envs = shard_envs(cfg.env, comm.rank, comm.world_size)
        check_jax_config(cfg, self.envs)
        self.seeds = env_seeds(cfg.train.seed, self.envs, start_index=ctx.launch_index)
        vec = make_vec_env(cfg.env, self.seeds)
        self.env, self.env_params, self.compiled_env = vec.env, vec.env_params, vec.compiled
        self.learner = JaxPPOLearner(
            cfg,
            comm,
            vec.observation_space,
            vec.action_space,
            minibatches_per_rank(cfg, self.envs, comm.world_size),
        )
        space = vec.action_space
        self.action_bounds = (space.low, space.high) if isinstance(space, gym.spaces.Box) else None
        self.carry: EnvCarry | None = None
        self.finished = 0
        self._iteration = jax.jit(
            jax.shard_map(
                self._rank_iteration,
                mesh=comm.mesh,
                in_specs=(P(), P(), P(AXIS), P()),
                out_specs=(P(), P(), P(AXIS), P(AXIS), P(AXIS)),
                # Env code is the libraries' own (Brax's solver loops) and fails shard_map's
                # per-axis type checks. Without them JAX adds no gradient sum of its own: the
                # update's one weighted psum is the only one (pcast there is then a no-op).
                check_vma=False,
            )
        )

    def start(self, fresh: bool) -> None:
        # The VecEnv's jitted reset: the same key chain, compiled once per env, not run op by op.
        keys, obs, states = self.compiled_env.reset(self.env_params, env_keys(self.seeds))
        zeros = jnp.zeros(self.envs.count)
        self.carry = EnvCarry(keys, states, obs, zeros, zeros, self.learner.key)

    def iteration(self, global_step: int) -> IterationResult:
        comm, learner = self.comm, self.learner
        lr = scheduled_learning_rate(self.cfg, global_step)
        with self.clock("update"):  # collection and update are one call
            params, opt_state, carry, stats, episodes = self._iteration(
                *comm.replicate((learner.params, learner.opt_state)),
                comm.stack_ranks(self.carry._replace(policy_key=learner.key)),
                comm.replicate(jnp.float32(lr)),
            )
            learner.params, learner.opt_state = comm.local((params, opt_state))
            self.carry = comm.own_rows(carry)
            learner.key = self.carry.policy_key
            stats, (return_sum, length_sum, count) = jax.device_get(comm.own_rows((stats, episodes)))
        self.finished += int(count)
        # The episodes that ended in this iteration (thousands of envs end many at once).
        episodes = EpisodeStats(float(return_sum), float(length_sum), int(count), self.finished)
        return self._result(lr, stats, episodes)

    def _rank_iteration(self, params, opt_state, carry: EnvCarry, lr):
        """One process's rollout and update inside ``shard_map`` (its row of ``carry``)."""
        cfg, model = self.cfg, self.learner.model
        carry = own_row(carry)

        def step(carry: EnvCarry, _):
            policy_key, sample_key = jax.random.split(carry.policy_key)
            out, log_std, values = model.apply(params, carry.obs)
            actions, log_probs = sample_actions(sample_key, out, log_std, model.continuous)
            env_actions = actions if self.action_bounds is None else jnp.clip(actions, *self.action_bounds)
            keys, step_keys = split_keys(carry.keys)
            obs, states, reward, terminated, truncated, final_obs = step_envs(
                self.env, self.env_params, step_keys, carry.states, env_actions
            )
            dones = terminated | truncated
            # A truncated episode did not end in the MDP: bootstrap from its final observation.
            final_values = model.apply(params, final_obs)[2]
            rewards = reward + cfg.algo.gamma * final_values * (truncated & ~terminated)
            episode_return = carry.episode_return + reward
            episode_length = carry.episode_length + 1
            ended = jnp.stack([(episode_return * dones).sum(), (episode_length * dones).sum(), dones.sum()])
            transition = Rollout(carry.obs, actions, log_probs, values, rewards, dones.astype(jnp.float32))
            carry = EnvCarry(
                keys,
                states,
                obs,
                jnp.where(dones, 0.0, episode_return),
                jnp.where(dones, 0.0, episode_length),
                policy_key,
            )
            return carry, (transition, ended)

        carry, (rollout, ended) = lax.scan(step, carry, None, length=cfg.algo.rollout_steps)
        last_values = model.apply(params, carry.obs)[2]
        policy_key, update_key = jax.random.split(carry.policy_key)
        skip = ~jnp.isfinite(rollout.obs).all()
        params, opt_state, stats = self.learner.algo.update(
            params, opt_state, rollout, last_values, lr, update_key, skip
        )
        carry = carry._replace(policy_key=policy_key)
        return params, opt_state, as_row(carry), as_row(stats), as_row(ended.sum(0))

    def close(self) -> None:
        self.carry = None
