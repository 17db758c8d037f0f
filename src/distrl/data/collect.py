"""Write a logged-transition dataset from an env with discrete or continuous actions (``distrl
collect``).

The logging policy is ``random``, ``epsilon-greedy:CHECKPOINT:EPS`` or ``checkpoint:CHECKPOINT``
(EPS: the share of uniformly random actions). For discrete actions each row records the exact
probability with which the logged action was drawn (null for the deterministic checkpoint policy),
so off-policy evaluation can reweight it; continuous actions have densities, not probabilities
(null), and the dataset keeps the env's action bounds. The same seed gives the same dataset.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import nn

from distrl.config.sections import EnvConfig
from distrl.data.schema import ACTION_HIGH, ACTION_LOW, CONTINUOUS_SCHEMA, SCHEMA
from distrl.envs import make_vec_env
from distrl.errors import UserError


@dataclass
class LoggingPolicy:
    """Chooses actions and says with which probability each chosen action was drawn (discrete
    actions; None for continuous ones and for a deterministic logger)."""

    action_space: gym.spaces.Discrete | gym.spaces.Box
    epsilon: float = 1.0
    """Share of uniformly random actions (1: the random policy)."""
    greedy: nn.Module | None = None
    """Deterministic policy the other actions come from (None: random policy)."""

    @torch.no_grad()
    def act(self, obs: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray | None]:
        n = len(obs)
        space = self.action_space
        if isinstance(space, gym.spaces.Discrete):
            random_actions = rng.integers(space.n, size=n)
        else:
            random_actions = rng.uniform(space.low, space.high, size=(n, *space.shape)).astype(np.float32)
        discrete_probability = np.full(n, 1.0 / space.n) if isinstance(space, gym.spaces.Discrete) else None
        if self.greedy is None:
            return random_actions, discrete_probability
        greedy = self.greedy(torch.as_tensor(obs, dtype=torch.float32)).numpy()
        if self.epsilon == 0.0:
            return greedy, None  # a deterministic logger has no propensities
        explore = rng.random(n) < self.epsilon
        actions = np.where(explore.reshape(n, *[1] * (greedy.ndim - 1)), random_actions, greedy)
        if discrete_probability is None:
            return actions, None
        probability = self.epsilon * discrete_probability + (1.0 - self.epsilon) * (actions == greedy)
        return actions, probability


def parse_policy(spec: str, action_space: gym.spaces.Discrete | gym.spaces.Box) -> LoggingPolicy:
    """``random`` | ``epsilon-greedy:CHECKPOINT:EPS`` | ``checkpoint:CHECKPOINT``."""
    from distrl.eval.policy import load_policy
    from distrl.models.memory import policy_state_size

    def feed_forward(checkpoint: str) -> nn.Module:
        policy = load_policy(Path(checkpoint)).policy
        if policy_state_size(policy):
            raise UserError(
                f"--policy {spec!r}: the checkpoint's policy has memory (model.memory), which logged "
                "rows do not carry; log with a policy without memory",
                code="data-collect-policy-has-memory",
            )
        return policy

    kind, _, rest = spec.partition(":")
    if kind == "random" and not rest:
        return LoggingPolicy(action_space)
    if kind == "checkpoint" and rest:
        return LoggingPolicy(action_space, 0.0, feed_forward(rest))
    if kind == "epsilon-greedy" and rest:
        checkpoint, _, eps = rest.rpartition(":")
        try:
            epsilon = float(eps)
        except ValueError:
            epsilon = -1.0
        if checkpoint and 0.0 <= epsilon <= 1.0:
            return LoggingPolicy(action_space, epsilon, feed_forward(checkpoint))
    raise UserError(
        f"--policy {spec!r}: expected random, epsilon-greedy:CHECKPOINT:EPS (EPS in [0, 1]) or "
        "checkpoint:CHECKPOINT",
        code="data-collect-policy-unknown",
    )


def collect_dataset(
    env_cfg: EnvConfig, policy_spec: str, steps: int, out: Path, rows_per_file: int, seed: int
) -> int:
    """Step ``env_cfg.num_envs`` envs until ``steps`` transitions are logged; return files written."""
    env = make_vec_env(env_cfg, [seed + i for i in range(env_cfg.num_envs)])
    space = env.action_space
    continuous = isinstance(space, gym.spaces.Box) and len(space.shape) == 1
    if not continuous and not isinstance(space, gym.spaces.Discrete):
        raise UserError(
            f"env {env_cfg.id!r}: collect needs Discrete or flat Box actions, not {space}",
            code="data-collect-action-space",
        )
    policy = parse_policy(policy_spec, space)
    if out.exists() and any(out.iterdir()):
        raise UserError(
            f"--out {out}: not empty; collect writes a new dataset into an empty dir",
            code="data-collect-out-not-empty",
        )
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    if continuous:
        bounds = {ACTION_LOW: json.dumps(space.low.tolist()), ACTION_HIGH: json.dumps(space.high.tolist())}
        writer = DatasetWriter(out, rows_per_file, CONTINUOUS_SCHEMA.with_metadata(bounds))
    else:
        writer = DatasetWriter(out, rows_per_file)
        all_actions = [True] * int(space.n)
    # Rows are written value by value from host arrays.
    obs = env.reset().numpy(force=True)
    episode = np.zeros(env.num_envs, dtype=np.int64)
    step_in_episode = np.zeros(env.num_envs, dtype=np.int64)
    while writer.rows_written + writer.pending < steps:
        actions, probability = policy.act(obs, rng)
        step = env.step(torch.as_tensor(actions, device=env.device))
        next_obs, reward, terminated, truncated, final_obs = (x.numpy(force=True) for x in step[:5])
        ended = terminated | truncated
        for i in range(env.num_envs):
            row = {
                "mdp_id": f"{seed + i}:{episode[i]}",
                "sequence_number": int(step_in_episode[i]),
                "state_features": obs[i].tolist(),
                "action": actions[i].tolist(),
                "action_probability": None if probability is None else float(probability[i]),
                "reward": float(reward[i]),
                # final_obs is where the step led, also when the episode ended there.
                "next_state_features": final_obs[i].tolist(),
                "terminal": bool(terminated[i]),
            }
            if not continuous:
                row |= {
                    "possible_actions": all_actions,
                    "possible_next_actions": [not terminated[i]] * len(all_actions),
                    "time_diff": 1,
                }
            writer.add(**row)
        step_in_episode = np.where(ended, 0, step_in_episode + 1)
        episode += ended
        obs = next_obs
    env.close()
    writer.close(limit=steps)
    return writer.files


class DatasetWriter:
    """Buffers rows and writes ``part-NNNNN.parquet`` files of ``rows_per_file`` rows, each in a
    few row groups (the units ranks share a dataset by when files are few)."""

    def __init__(self, out: Path, rows_per_file: int, schema: pa.Schema = SCHEMA) -> None:
        self.out = out
        self.rows_per_file = rows_per_file
        self.schema = schema
        self.columns: dict[str, list] = {name: [] for name in schema.names}
        self.rows_written = 0
        self.files = 0

    @property
    def pending(self) -> int:
        return len(self.columns["mdp_id"])

    def add(self, **row: object) -> None:
        for name, value in row.items():
            self.columns[name].append(value)
        if self.pending >= self.rows_per_file:
            self._flush(self.rows_per_file)

    def close(self, limit: int) -> None:
        """Write what is left, up to ``limit`` rows in all."""
        while self.pending and self.rows_written < limit:
            self._flush(min(self.pending, limit - self.rows_written, self.rows_per_file))

    def _flush(self, rows: int) -> None:
        table = pa.table({name: values[:rows] for name, values in self.columns.items()}, schema=self.schema)
        path = self.out / f"part-{self.files:05d}.parquet"
        try:
            pq.write_table(table, path, row_group_size=max(1, self.rows_per_file // 4))
        except OSError as exc:
            raise UserError(
                f"writing {path} failed: {exc.strerror or exc}", code="data-collect-write-failed"
            ) from None
        self.columns = {name: values[rows:] for name, values in self.columns.items()}
        self.rows_written += rows
        self.files += 1
