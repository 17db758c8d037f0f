"""What every replay-based algorithm's section holds (DQN, SAC): collection between rounds of
gradient steps, global batches drawn from each rank's own replay buffer; each algorithm adds its
own update's keys and defaults."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, NonNegativeInt, PositiveInt

from distrl.config.algorithm import AlgorithmSection, RunSections
from distrl.config.base import Size
from distrl.sharding import env_counts, even_counts


class OffPolicySection(AlgorithmSection):
    """Sizes summed over ranks are marked."""

    phases: ClassVar[tuple[str, ...]] = ("replay",)

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
    gamma: float = Field(0.99, ge=0.0, le=1.0)
    """Discount factor."""

    def history_per_env(self, global_envs: int) -> int:
        """Steps each env's replay keeps: ``buffer_size`` over all ranks' envs, so every env keeps
        the same history on any number of ranks."""
        return -(-self.buffer_size // global_envs)

    def sizes(self, run: RunSections, world_size: int) -> list[Size]:
        batch = Size("samples per gradient step", self.batch_size, even_counts(self.batch_size, world_size))
        if run.data.path is not None:  # offline: no envs, only the logged rows' batches
            return [batch]
        envs = env_counts(run.env, world_size)
        steps = [self.rollout_steps * count for count in envs]
        buffers = [self.history_per_env(sum(envs)) * count for count in envs]
        return [
            Size("envs", sum(envs), envs),
            Size("env steps per iteration", sum(steps), steps),
            Size("gradient steps per iteration", self.gradient_steps, [self.gradient_steps] * world_size),
            batch,
            Size("replay buffer", sum(buffers), buffers),
        ]
