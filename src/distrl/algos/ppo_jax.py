"""PPO in JAX (Flax + Optax): the clipped-surrogate update of ``distrl.algos.ppo``, as pure
functions that compile into one step (GAE, advantage normalisation, every epoch and minibatch).

The update knows ranks only through ``axis_name``: inside ``shard_map`` the minibatch gradient,
its sample count and the advantages' moments are summed over that mesh axis, so every rank
applies the same sample-weighted global gradient (as ``FlatGradients.average_`` does for torch);
with ``axis_name=None`` it is one process's update.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from jax import lax
from jax.flatten_util import ravel_pytree

from distrl.algos.ppo_config import PPOConfig
from distrl.config.sections import ModelConfig

_ACTIVATIONS = {"tanh": jnp.tanh, "relu": jax.nn.relu, "elu": jax.nn.elu}
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


class MLP(nn.Module):
    hidden_sizes: tuple[int, ...]
    n_out: int
    activation: str
    out_gain: float

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        act = _ACTIVATIONS[self.activation]
        orthogonal, zeros = nn.initializers.orthogonal, nn.initializers.zeros
        # Layers named by their index in the torch model's nn.Sequential: a JAX checkpoint holds
        # the same tensor names as a torch one, so `distrl eval` and `export` read both.
        for i, width in enumerate(self.hidden_sizes):
            x = act(
                nn.Dense(width, kernel_init=orthogonal(math.sqrt(2)), bias_init=zeros, name=str(2 * i))(x)
            )
        last = str(2 * len(self.hidden_sizes))
        return nn.Dense(self.n_out, kernel_init=orthogonal(self.out_gain), bias_init=zeros, name=last)(x)


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs; a categorical policy for discrete actions, a diagonal
    Gaussian with state-independent log-std for continuous ones (the torch ``ActorCritic``)."""

    n_out: int
    continuous: bool
    cfg: ModelConfig

    @nn.compact
    def __call__(self, obs: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """(actor output: logits or Gaussian mean, log-std (zeros for discrete), value)."""
        hidden, activation = tuple(self.cfg.hidden_sizes), self.cfg.activation
        out = MLP(hidden, self.n_out, activation, out_gain=0.01, name="actor")(obs)
        value = MLP(hidden, 1, activation, out_gain=1.0, name="critic")(obs)[..., 0]
        log_std = jnp.zeros(self.n_out)
        if self.continuous:
            log_std = self.param("log_std", nn.initializers.constant(self.cfg.init_log_std), (self.n_out,))
        return out, log_std, value


def log_prob_entropy(
    out: jax.Array, log_std: jax.Array, actions: jax.Array, continuous: bool
) -> tuple[jax.Array, jax.Array]:
    """Log-probability of ``actions`` and the policy's entropy, per sample."""
    if continuous:
        z = (actions - out) * jnp.exp(-log_std)
        log_probs = (-0.5 * z**2 - log_std - _LOG_SQRT_2PI).sum(-1)
        entropy = jnp.broadcast_to((0.5 + _LOG_SQRT_2PI + log_std).sum(-1), log_probs.shape)
        return log_probs, entropy
    log_p = jax.nn.log_softmax(out)
    log_probs = jnp.take_along_axis(log_p, actions[..., None].astype(jnp.int32), -1)[..., 0]
    return log_probs, -(jnp.exp(log_p) * log_p).sum(-1)


def sample_actions(
    key: jax.Array, out: jax.Array, log_std: jax.Array, continuous: bool
) -> tuple[jax.Array, jax.Array]:
    """Sampled actions and their log-probabilities."""
    if continuous:
        actions = out + jnp.exp(log_std) * jax.random.normal(key, out.shape)
    else:
        actions = jax.random.categorical(key, out)
    return actions, log_prob_entropy(out, log_std, actions, continuous)[0]


def deterministic_actions(out: jax.Array, continuous: bool) -> jax.Array:
    return out if continuous else jnp.argmax(out, -1)


class Rollout(NamedTuple):
    """One rank's ``[steps, envs, ...]`` rollout; rewards already carry gamma * V(final obs)
    where an episode was truncated."""

    obs: jax.Array
    actions: jax.Array
    log_probs: jax.Array
    values: jax.Array
    rewards: jax.Array
    dones: jax.Array


def compute_gae(
    rewards: jax.Array, values: jax.Array, dones: jax.Array, last_values: jax.Array, gamma: float, lam: float
) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimation over ``[steps, envs]`` (``storage.rollout.compute_gae``):
    ``dones[t]`` stops anything flowing back from t+1. Returns (advantages, returns)."""

    def backwards(carry, step):
        next_advantage, next_values = carry
        reward, value, done = step
        not_done = 1.0 - done
        delta = reward + gamma * next_values * not_done - value
        advantage = delta + gamma * lam * not_done * next_advantage
        return (advantage, value), advantage

    init = (jnp.zeros_like(last_values), last_values)
    _, advantages = lax.scan(backwards, init, (rewards, values, dones), reverse=True)
    return advantages, advantages + values


def _where(condition: jax.Array, if_true, if_false):
    """``if_true`` where ``condition`` holds, else ``if_false``, leaf by leaf of two pytrees."""
    return jax.tree.map(lambda a, b: jnp.where(condition, a, b), if_true, if_false)


class PPOStats(NamedTuple):
    policy_loss: jax.Array
    value_loss: jax.Array
    entropy: jax.Array
    approx_kl: jax.Array
    clip_fraction: jax.Array
    grad_norm: jax.Array
    skipped_minibatches: jax.Array


class JaxPPO:
    """The update's static settings; ``update`` runs inside ``jit`` (and ``shard_map`` when
    ``axis_name`` names the ranks' mesh axis)."""

    def __init__(
        self,
        model: ActorCritic,
        cfg: PPOConfig,
        num_minibatches: int,
        axis_name: str | None = None,
    ) -> None:
        self.model = model
        self.cfg = cfg
        self.num_minibatches = num_minibatches
        self.axis_name = axis_name
        self.optimizer = optax.inject_hyperparams(optax.adam)(
            learning_rate=cfg.learning_rate, eps=cfg.adam_eps
        )

    def _sum(self, x):
        """Sum over ranks (the identity in one process)."""
        return x if self.axis_name is None else lax.psum(x, self.axis_name)

    def update(
        self,
        params,
        opt_state,
        rollout: Rollout,
        last_values: jax.Array,
        learning_rate: jax.Array,
        key: jax.Array,
        skip: jax.Array,
    ):
        """GAE, advantages normalised over all ranks, then ``update_epochs`` passes of minibatch
        steps. ``skip`` (true on any rank: a non-finite observation) leaves everything unchanged
        on every rank. Returns (params, opt_state, mean PPOStats)."""
        cfg = self.cfg
        advantages, returns = compute_gae(
            rollout.rewards, rollout.values, rollout.dones, last_values, cfg.gamma, cfg.gae_lambda
        )
        if cfg.normalize_advantages:
            count, total, total_sq = self._sum(
                jnp.stack([advantages.size, advantages.sum(), (advantages**2).sum()])
            )
            mean = total / count
            std = jnp.sqrt(jnp.maximum(total_sq - count * mean * mean, 0.0) / jnp.maximum(count - 1.0, 1.0))
            advantages = (advantages - mean) / (std + 1e-8)
        flat = jax.tree.map(
            lambda x: x.reshape(-1, *x.shape[2:]),
            (rollout.obs, rollout.actions, rollout.log_probs, rollout.values, advantages, returns),
        )
        opt_state.hyperparams["learning_rate"] = learning_rate
        skip = self._sum(skip.astype(jnp.float32)) > 0

        def epoch(carry, epoch_key):
            return lax.scan(self._minibatch_step, carry, self._minibatches(epoch_key, flat))

        keys = jax.random.split(key, cfg.update_epochs)
        (new_params, new_opt_state), stats = lax.scan(epoch, (params, opt_state), keys)
        stats = jax.tree.map(jnp.mean, stats)
        # Computed either way (a skipped rollout is rare), then dropped: no branch to compile twice.
        params, opt_state = _where(skip, (params, opt_state), (new_params, new_opt_state))
        stats = PPOStats(
            *(jnp.where(skip, 0.0, value) for value in stats[:-1]),
            skipped_minibatches=jnp.where(skip, 1.0, stats.skipped_minibatches),
        )
        # A count of skipped steps, like the torch learner's, not a share.
        steps = cfg.update_epochs * self.num_minibatches
        return params, opt_state, stats._replace(skipped_minibatches=stats.skipped_minibatches * steps)

    def _minibatches(self, key: jax.Array, flat: tuple[jax.Array, ...]):
        """One epoch's ``num_minibatches`` parts of the local batch in a random order, padded to
        equal size with masked-out samples (parts differ by at most one real sample)."""
        n = flat[0].shape[0]
        size = -(-n // self.num_minibatches)
        order = jnp.concatenate(
            [jax.random.permutation(key, n), jnp.full(size * self.num_minibatches - n, n)]
        )
        order = order.reshape(self.num_minibatches, size)
        mask = (order < n).astype(jnp.float32)
        parts = jax.tree.map(lambda x: jnp.take(x, jnp.minimum(order, n - 1), axis=0), flat)
        return parts, mask

    def _minibatch_step(self, carry, minibatch):
        params, opt_state = carry
        mb, mask = minibatch
        count = mask.sum()
        # Parameters are the same on every rank; under shard_map's per-axis type checks JAX
        # would sum their gradient over the ranks itself (and per tensor). Marked per-rank, each
        # rank's gradient stays its own until the one weighted sum below (without the checks,
        # as in the compiled runner, the mark is a no-op and no sum is added).
        local_params = params if self.axis_name is None else lax.pcast(params, self.axis_name, to="varying")
        (_, stats), grads = jax.value_and_grad(self._loss, has_aux=True)(local_params, mb, mask)
        # Sample-weighted mean over ranks (a rank with fewer samples weighs less), as one flat
        # sum with the count in its last slot: a psum per parameter tensor costs one collective
        # each (~2 ms apiece between CPU processes).
        flat, unravel = ravel_pytree(grads)
        summed = self._sum(jnp.concatenate([flat * count, count[None]]))
        grads = unravel(summed[:-1] / jnp.maximum(summed[-1], 1.0))
        grad_norm = optax.tree.norm(grads)
        finite = jnp.isfinite(grad_norm)
        scale = jnp.where(
            grad_norm > self.cfg.max_grad_norm, self.cfg.max_grad_norm / (grad_norm + 1e-6), 1.0
        )
        grads = jax.tree.map(lambda g: g * scale, grads)
        updates, new_opt_state = self.optimizer.update(grads, opt_state, params)
        new_params = optax.apply_updates(params, updates)
        # A non-finite gradient (on any rank: it spreads through the sum) skips the step everywhere.
        carry = _where(finite, (new_params, new_opt_state), (params, opt_state))
        stats = PPOStats(*stats, grad_norm=grad_norm, skipped_minibatches=1.0 - finite.astype(jnp.float32))
        return carry, stats

    def _loss(self, params, mb, mask):
        """Clipped surrogate + (optionally clipped) value loss - entropy bonus, means over the
        local minibatch's real samples."""
        cfg = self.cfg
        obs, actions, old_log_probs, old_values, advantages, returns = mb
        out, log_std, values = self.model.apply(params, obs)
        log_probs, entropy = log_prob_entropy(out, log_std, actions, self.model.continuous)
        count = jnp.maximum(mask.sum(), 1.0)
        mean = lambda x: (x * mask).sum() / count  # noqa: E731
        log_ratio = log_probs - old_log_probs
        ratio = jnp.exp(log_ratio)
        surrogate = advantages * ratio
        clipped = advantages * jnp.clip(ratio, 1.0 - cfg.clip_coef, 1.0 + cfg.clip_coef)
        policy_loss = -mean(jnp.minimum(surrogate, clipped))
        value_error = (values - returns) ** 2
        if cfg.clip_value_loss:
            clipped_values = old_values + jnp.clip(values - old_values, -cfg.clip_coef, cfg.clip_coef)
            value_error = jnp.maximum(value_error, (clipped_values - returns) ** 2)
        value_loss = 0.5 * mean(value_error)
        entropy = mean(entropy)
        loss = policy_loss + cfg.value_coef * value_loss - cfg.entropy_coef * entropy
        approx_kl = mean((ratio - 1.0) - log_ratio)
        clip_fraction = mean((jnp.abs(ratio - 1.0) > cfg.clip_coef).astype(jnp.float32))
        return loss, (policy_loss, value_loss, entropy, approx_kl, clip_fraction)
