"""Read a Minari dataset (the offline-RL community's format; ``pip install 'distrl[minari]'``)
directly from its directory through minari's own API, shared out over ranks like a Parquet
dataset (``distrl.data.logged``).

Units are episodes: consecutive episodes grouped into units of at least ``rows_per_unit``
transitions when there are at least as many groups as ranks, else single episodes; the r-th of N
ranks takes units r, r + N, ... so every transition belongs to exactly one rank. An episode of T
steps stores T + 1 observations; its transitions are (obs[t], actions[t], rewards[t], obs[t + 1],
terminations[t]): a truncated episode is not terminal, so its last step is bootstrapped. Minari
stores no logging propensities (NaN here) and no action masks (every discrete action is possible);
continuous actions (a flat Box) keep the action space's bounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import minari
import numpy as np

from distrl.data.logged import LoggedDataset, Rows
from distrl.errors import UserError

ROWS_PER_UNIT = 10_000
"""Transitions per unit of grouped episodes: ``distrl collect``'s default rows per file."""


@dataclass(frozen=True)
class EpisodeRange:
    """Episodes ``first`` to ``first + count - 1`` of a Minari dataset."""

    first: int
    count: int
    rows: int


class MinariLoggedDataset:
    """A Minari dataset with ``LoggedDataset``'s interface (Discrete or flat Box actions, flat Box
    observations).

    ``path`` is the dataset's directory (``<root>/<dataset id>``, which holds ``data/``) or that
    ``data/`` directory itself (the one holding Minari's ``metadata.json``); episodes are grouped
    into units of at least ``rows_per_unit`` transitions."""

    def __init__(self, path: Path, on_bad_row: str = "error", rows_per_unit: int = ROWS_PER_UNIT) -> None:
        data_dir = path / "data" if (path / "data" / "metadata.json").is_file() else path
        self.path = path
        self.on_bad_row = on_bad_row
        self.skipped_rows = 0
        try:
            self.data = minari.MinariDataset(data_dir)
        except ModuleNotFoundError as exc:  # its storage backend (h5py) is an extra of minari's
            install = "pip install 'distrl[minari]'"
            raise UserError(
                f"--data {path}: reading it needs {exc.name} ({install})",
                code="data-minari-dependency-missing",
            ) from None
        except (ValueError, KeyError, OSError) as exc:
            raise UserError(
                f"--data {path}: not a readable Minari dataset ({exc})", code="data-minari-unreadable"
            ) from None
        obs_space, action_space = self.data.observation_space, self.data.action_space
        self.continuous = isinstance(action_space, gym.spaces.Box) and len(action_space.shape) == 1
        if not self.continuous and not isinstance(action_space, gym.spaces.Discrete):
            raise UserError(
                f"--data {path}: the Minari dataset's action space is {_describe(action_space)}; "
                "distrl reads Discrete or flat Box actions",
                code="data-minari-action-space",
            )
        if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) != 1:
            raise UserError(
                f"--data {path}: the Minari dataset's observation space is {_describe(obs_space)}; "
                "distrl reads flat Box observations only",
                code="data-minari-observation-space",
            )
        self.obs_dim = obs_space.shape[0]
        self.parametric = False
        """Minari datasets have no candidate sets with features."""
        self.action_dim: int | None = None
        self.action_bounds: tuple[list[float], list[float]] | None = None
        self.num_actions = self.first_action = 0
        if self.continuous:
            self.action_bounds = (action_space.low.tolist(), action_space.high.tolist())
        else:
            self.num_actions, self.first_action = int(action_space.n), int(action_space.start)
        if self.data.total_episodes == 0:
            raise UserError(f"--data {path}: the Minari dataset holds no episodes", code="data-minari-empty")
        # Episode lengths come from minari's per-episode metadata, so sizing units reads no steps.
        metadata = self.data.storage.get_episode_metadata(range(self.data.total_episodes))
        episode_rows = [int(m["total_steps"]) for m in metadata]
        self.episodes = [EpisodeRange(i, 1, rows) for i, rows in enumerate(episode_rows)]
        self.groups = _group(episode_rows, rows_per_unit)

    action_space = LoggedDataset.action_space
    empty_rows = LoggedDataset.empty_rows

    def summary(self) -> list[tuple[str, int]]:
        """(episodes, transitions) of every group: what two copies of a dataset must agree on."""
        return [(f"{self.data.id} episodes {g.first}-{g.first + g.count - 1}", g.rows) for g in self.groups]

    def units(self, world_size: int) -> list[EpisodeRange]:
        """Groups of episodes when there are enough for every rank, else single episodes."""
        return self.groups if len(self.groups) >= world_size else self.episodes

    def shard(self, rank: int, world_size: int) -> list[EpisodeRange]:
        return self.units(world_size)[rank::world_size]

    def pieces(self, unit: EpisodeRange) -> list[EpisodeRange]:
        """Episode ranges are read whole (a range holds about ``rows_per_unit`` rows)."""
        return [unit]

    def read(self, unit: EpisodeRange) -> Rows:
        """A unit's transitions, validated: a bad one stops with episode, step and field
        (``on_bad_row: error``) or is dropped and counted in ``skipped_rows`` (``skip``)."""
        parts = []
        for episode in self.data.iterate_episodes(range(unit.first, unit.first + unit.count)):
            rows = self._transitions(episode)
            checks = self._checks(rows)
            bad = np.logical_or.reduce(list(checks.values()))
            if bad.any():
                step = int(np.flatnonzero(bad)[0])
                if self.on_bad_row == "error":
                    problem = next(name for name, failed in checks.items() if failed[step])
                    raise UserError(
                        f"{self.path}: episode {episode.id}: step {step}: {problem} "
                        "(data.on_bad_row=skip drops such steps)",
                        code="data-bad-row",
                    )
                self.skipped_rows += int(bad.sum())
                rows = rows.take(np.flatnonzero(~bad))
            parts.append(rows)
        return Rows.concat(parts)

    def _transitions(self, episode: minari.EpisodeData) -> Rows:
        observations = np.asarray(episode.observations, dtype=np.float32)
        steps = len(episode)
        return Rows(
            obs=observations[:-1],
            actions=(
                np.asarray(episode.actions, dtype=np.float32).reshape(steps, -1)
                if self.continuous
                else np.asarray(episode.actions, dtype=np.int64) - self.first_action
            ),
            rewards=np.asarray(episode.rewards, dtype=np.float32),
            next_obs=observations[1:],
            terminal=np.asarray(episode.terminations, dtype=bool),
            next_action_mask=np.ones((steps, self.num_actions), dtype=bool),
            propensity=np.full(steps, np.nan),
        )

    def _checks(self, rows: Rows) -> dict[str, np.ndarray]:
        """Per problem, the steps that have it."""
        if self.action_bounds is None:
            outside = (rows.actions < 0) | (rows.actions >= self.num_actions)
        else:
            low, high = (np.asarray(bound) for bound in self.action_bounds)
            # NaN compares false both ways: a non-finite action is outside too.
            outside = ~((rows.actions >= low) & (rows.actions <= high)).all(axis=1)
        return {
            "observation: not a finite number": ~np.isfinite(rows.obs).all(axis=1),
            "next observation: not a finite number": ~np.isfinite(rows.next_obs).all(axis=1),
            "reward: not a finite number": ~np.isfinite(rows.rewards),
            "action: not in the action space": outside,
        }


def _group(episode_rows: list[int], rows_per_unit: int) -> list[EpisodeRange]:
    """Consecutive episodes in units of at least ``rows_per_unit`` transitions (the last may hold
    fewer)."""
    groups: list[EpisodeRange] = []
    first = rows = 0
    for episode, steps in enumerate(episode_rows):
        rows += steps
        if rows >= rows_per_unit or episode == len(episode_rows) - 1:
            groups.append(EpisodeRange(first, episode + 1 - first, rows))
            first, rows = episode + 1, 0
    return groups


def _describe(space: gym.Space) -> str:
    """A space's type and shape on one line (``str(space)`` prints its bounds, possibly on many)."""
    return f"{type(space).__name__} {space.shape}" if space.shape else type(space).__name__
