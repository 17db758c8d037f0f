"""DQN's hyperparameters (``algo:`` with ``name: dqn``), apart from the algorithm so that reading a
config never imports torch."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar, Literal

from pydantic import Field, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt

from distrl.config.base import Section, Size
from distrl.sharding import env_counts, even_counts

if TYPE_CHECKING:
    from distrl.config.run import RunConfig


class DQNConfig(Section):
    """Double DQN with a target network; ``algo.name: dqn``. Sizes summed over ranks are marked."""

    resume_fixed_keys: ClassVar[tuple[str, ...]] = ("model.hidden_sizes", "model.activation")
    """Keys a resumed run may not change: they decide the shapes of what the checkpoint holds."""
    step_unit: ClassVar[str] = "env steps"
    """What ``train.total_steps`` counts, in the final line."""
    honoured_train_switches: ClassVar[tuple[str, ...]] = ()
    """None: DQN's small-batch steps are not compiled, and its networks have no transformer."""

    name: Literal["dqn"]
    """The algorithm: data-parallel (double) DQN, online or from logged data."""
    rollout_steps: PositiveInt = 32
    """Env steps per env between rounds of gradient steps (per iteration)."""
    gradient_steps: PositiveInt = 128
    """Gradient steps per iteration: with ``env.num_envs`` global, the ratio of gradient steps to
    env steps is the same on any number of ranks."""
    batch_size: PositiveInt = 64
    """Samples per gradient step summed over all ranks; each rank draws its share from its own
    buffer (ranks differ by at most one sample)."""
    buffer_size: PositiveInt = 100_000
    """Transitions kept, summed over all ranks (each rank keeps the newest of its own envs)."""
    learning_starts: NonNegativeInt = 1_000
    """Global env steps collected before the first gradient step."""
    learning_rate: PositiveFloat = 2.3e-3
    """Adam's learning rate (its start, with ``anneal_lr``)."""
    anneal_lr: bool = False
    """Linearly decay the learning rate to zero over ``train.total_steps``."""
    gamma: float = Field(0.99, ge=0.0, le=1.0)
    """Discount factor."""
    n_step: PositiveInt = 1
    """Rewards summed before bootstrapping (stopping early where an episode ends)."""
    double_q: bool = True
    """Choose the bootstrap action with the online network, value it with the target network."""
    target_update_interval: PositiveInt = 128
    """Gradient steps between target-network updates."""
    tau: float = Field(1.0, gt=0.0, le=1.0)
    """Target update: 1 copies the online network, less moves the target that far towards it."""
    loss: Literal["huber", "mse"] = "huber"
    """The TD loss: Huber (smooth L1) or squared error."""
    max_grad_norm: PositiveFloat = 10.0
    """Clip the global gradient norm, computed after the cross-rank average."""
    exploration_initial_eps: float = Field(1.0, ge=0.0, le=1.0)
    """Epsilon of epsilon-greedy acting at the start."""
    exploration_final_eps: float = Field(0.04, ge=0.0, le=1.0)
    """Epsilon after ``exploration_fraction`` of the run."""
    exploration_fraction: float = Field(0.16, gt=0.0, le=1.0)
    """Share of ``train.total_steps`` over which epsilon falls linearly to its final value."""
    cql_alpha: NonNegativeFloat = 0.0
    """Weight of the conservative regulariser logsumexp_a Q(s, a) - Q(s, a_logged) (0: off)."""
    adam_eps: PositiveFloat = 1e-8
    """Adam's epsilon."""

    def sizes(self, run: RunConfig, world_size: int) -> list[Size]:
        batch = Size("samples per gradient step", self.batch_size, even_counts(self.batch_size, world_size))
        if run.data.path is not None:  # offline: no envs, only the logged rows' batches
            return [batch]
        envs = env_counts(run.env, world_size)
        steps = [self.rollout_steps * count for count in envs]
        # Each env keeps the same history: buffer_size over all ranks' envs (OffPolicyRunner).
        per_env = max(-(-self.buffer_size // sum(envs)), self.n_step)
        buffers = [per_env * count for count in envs]
        return [
            Size("envs", sum(envs), envs),
            Size("env steps per iteration", sum(steps), steps),
            Size("gradient steps per iteration", self.gradient_steps, [self.gradient_steps] * world_size),
            batch,
            Size("replay buffer", sum(buffers), buffers),
        ]
