"""Read a logged-transition dataset: validated, shared out over ranks, streamed through a bounded
shuffle buffer, so no rank ever holds the whole dataset.

Sharing: the N ranks that divide one copy of the data (all ranks under ``data.layout: copy``, a
node's ranks under ``split``, ``ranks_sharing_a_copy``) split it into units: its files when there
are at least N, else its row groups; the r-th of them takes units r, r + N, r + 2N, ... so every
row belongs to exactly one rank.
Each epoch a rank reads its units in a fresh order and draws rows at random from a buffer of at
most ``shuffle_buffer`` rows, so every row comes out exactly once per epoch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from distrl.data.schema import REQUIRED
from distrl.errors import UserError

FLOAT_LISTS = ("state_features", "next_state_features")
MASK_LISTS = ("possible_actions", "possible_next_actions")


@dataclass(frozen=True)
class Unit:
    """A file, or one row group of it (``row_group`` None: the whole file)."""

    path: Path
    row_group: int | None
    rows: int
    first_row: int = 0
    """The unit's first row within its file (for error messages)."""


@dataclass
class Rows:
    """Decoded rows as arrays: the columns a learner needs."""

    obs: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_obs: np.ndarray
    terminal: np.ndarray
    next_action_mask: np.ndarray
    propensity: np.ndarray
    """The logger's probability of the logged action; NaN where it was deterministic (null)."""

    def __len__(self) -> int:
        return len(self.actions)

    def take(self, idx: np.ndarray) -> Rows:
        return Rows(*(getattr(self, f)[idx] for f in self.__dataclass_fields__))

    @staticmethod
    def empty(obs_dim: int, num_actions: int) -> Rows:
        return Rows(
            np.zeros((0, obs_dim), np.float32),
            np.zeros(0, np.int64),
            np.zeros(0, np.float32),
            np.zeros((0, obs_dim), np.float32),
            np.zeros(0, bool),
            np.zeros((0, num_actions), bool),
            np.zeros(0),
        )

    @staticmethod
    def concat(parts: list[Rows]) -> Rows:
        return Rows(*(np.concatenate([getattr(p, f) for p in parts]) for f in Rows.__dataclass_fields__))


class LoggedDataset:
    def __init__(self, path: Path, on_bad_row: str = "error") -> None:
        files = sorted(path.glob("*.parquet")) if path.is_dir() else []
        if not files:
            raise UserError(f"--data {path}: no .parquet files there")
        self.on_bad_row = on_bad_row
        self.skipped_rows = 0
        self.whole_files: list[Unit] = []
        self.row_groups: list[Unit] = []
        for file in files:  # each file's footer is read once, here
            parquet = _open(file)
            self._check_columns(file, parquet.schema_arrow)
            first_row = 0
            for group in range(parquet.metadata.num_row_groups):
                rows = parquet.metadata.row_group(group).num_rows
                self.row_groups.append(Unit(file, group, rows, first_row))
                first_row += rows
            self.whole_files.append(Unit(file, None, parquet.metadata.num_rows))
        first = _read(self.row_groups[0])
        self.obs_dim = len(first.column("state_features")[0])
        self.num_actions = len(first.column("possible_actions")[0])

    def summary(self) -> list[tuple[str, int]]:
        """(file name, rows) of every file: what two copies of a dataset must agree on."""
        return [(unit.path.name, unit.rows) for unit in self.whole_files]

    def units(self, world_size: int) -> list[Unit]:
        """Whole files when there are enough for every rank, else row groups."""
        return self.whole_files if len(self.whole_files) >= world_size else self.row_groups

    def shard(self, rank: int, world_size: int) -> list[Unit]:
        return self.units(world_size)[rank::world_size]

    def read(self, unit: Unit) -> Rows:
        """A unit's rows, validated: a bad row stops with file, row and column (``on_bad_row:
        error``) or is dropped and counted in ``skipped_rows`` (``skip``)."""
        table = _read(unit)
        bad = self._bad_rows(table)
        if bad:
            row, column, problem = bad[0]
            if self.on_bad_row == "error":
                raise UserError(
                    f"{unit.path}: row {unit.first_row + row}: column {column}: {problem} "
                    "(data.on_bad_row=skip drops such rows)"
                )
            self.skipped_rows += len({r for r, _, _ in bad})
            keep = np.ones(len(table), dtype=bool)
            keep[[r for r, _, _ in bad]] = False
            table = table.filter(pa.array(keep))
        return _decode(table)

    def _check_columns(self, file: Path, schema: pa.Schema) -> None:
        missing = [c for c in REQUIRED if c not in schema.names]
        if missing:
            raise UserError(f"{file}: column {missing[0]} is missing (a dataset needs {', '.join(REQUIRED)})")

    def _bad_rows(self, table: pa.Table) -> list[tuple[int, str, str]]:
        """(row, column, problem) of every malformed row, in row order."""
        problems: list[tuple[int, str, str]] = []
        for column in FLOAT_LISTS:
            lengths = pc.list_value_length(table.column(column)).to_numpy(zero_copy_only=False)
            for row in np.flatnonzero(lengths != self.obs_dim):
                problems.append((int(row), column, f"{lengths[row]} features, not {self.obs_dim}"))
            values = _list_matrix(table.column(column), self.obs_dim, lengths)
            for row in np.flatnonzero(~np.isfinite(values).all(axis=1)):
                problems.append((int(row), column, "not a finite number"))
        for column in MASK_LISTS:
            lengths = pc.list_value_length(table.column(column)).to_numpy(zero_copy_only=False)
            for row in np.flatnonzero(lengths != self.num_actions):
                problems.append((int(row), column, f"{lengths[row]} entries for {self.num_actions} actions"))
        reward = table.column("reward").to_numpy(zero_copy_only=False).astype(np.float64)
        for row in np.flatnonzero(~np.isfinite(reward)):
            problems.append((int(row), "reward", "not a finite number"))
        propensity = table.column("action_probability").to_numpy(zero_copy_only=False).astype(np.float64)
        given = ~np.isnan(propensity)
        for row in np.flatnonzero(given & ~((propensity > 0) & (propensity <= 1))):
            problems.append((int(row), "action_probability", f"{propensity[row]} is outside (0, 1]"))
        actions = table.column("action").to_numpy(zero_copy_only=False)
        possible = table.column("possible_actions").to_pylist()
        for row, action in enumerate(actions):
            mask = possible[row]
            if not (0 <= action < self.num_actions) or (len(mask) == self.num_actions and not mask[action]):
                problems.append((row, "action", f"action {action} is not among the possible actions"))
        return sorted(problems)


def ranks_sharing_a_copy(layout: str, node_of_rank: list[int], rank: int) -> list[int]:
    """The ranks that divide the copy of the data ``rank`` reads: all of them under ``copy``, the
    ranks of its own node under ``split``."""
    if layout == "copy":
        return list(range(len(node_of_rank)))
    return [r for r, node in enumerate(node_of_rank) if node == node_of_rank[rank]]


class ShuffledStream:
    """One rank's rows, epoch after epoch: units in a fresh order each epoch, rows drawn at random
    from a buffer of at most ``buffer_rows``; every row of the shard comes out once per epoch."""

    def __init__(self, dataset: LoggedDataset, units: list[Unit], buffer_rows: int, seed: int) -> None:
        self.dataset = dataset
        self.units = units
        self.buffer_rows = buffer_rows
        self.seed = seed
        self.rows_per_epoch = sum(u.rows for u in units)

    def batches(self, batch_size: int, epoch: int) -> Iterator[Rows]:
        """Epoch ``epoch``'s rows in batches of ``batch_size`` (the last one smaller)."""
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(len(self.units))
        pending = iter(self.units[i] for i in order)
        buffer: Rows | None = None
        exhausted = False
        while True:
            while not exhausted and (buffer is None or len(buffer) < self.buffer_rows):
                unit = next(pending, None)
                if unit is None:
                    exhausted = True
                    break
                rows = self.dataset.read(unit)
                buffer = rows if buffer is None else Rows.concat([buffer, rows])
            if buffer is None or len(buffer) == 0:
                break
            if exhausted or len(buffer) >= batch_size:
                size = min(batch_size, len(buffer))
                picked = rng.choice(len(buffer), size=size, replace=False)
                keep = np.ones(len(buffer), dtype=bool)
                keep[picked] = False
                yield buffer.take(picked)
                buffer = buffer.take(np.flatnonzero(keep))


def _open(path: Path) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise UserError(f"{path}: not a readable Parquet file ({exc})") from None


def _read(unit: Unit) -> pa.Table:
    file = _open(unit.path)
    return file.read() if unit.row_group is None else file.read_row_group(unit.row_group)


def _list_matrix(column: pa.ChunkedArray, width: int, lengths: np.ndarray) -> np.ndarray:
    """A list<float> column as a [rows, width] array; rows of another length are NaN here (they
    are reported as a length problem)."""
    flat = pc.list_flatten(column).to_numpy(zero_copy_only=False).astype(np.float64)
    if (lengths == width).all():
        return flat.reshape(len(lengths), width)
    out = np.full((len(lengths), width), np.nan)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    for row in np.flatnonzero(lengths == width):
        out[row] = flat[offsets[row] : offsets[row] + width]
    return out


def _decode(table: pa.Table) -> Rows:
    n = len(table)

    def matrix(column: str, dtype: type) -> np.ndarray:
        flat = pc.list_flatten(table.column(column)).to_numpy(zero_copy_only=False)
        return flat.astype(dtype).reshape(n, -1) if n else np.zeros((0, 0), dtype=dtype)

    return Rows(
        obs=matrix("state_features", np.float32),
        actions=table.column("action").to_numpy(zero_copy_only=False).astype(np.int64),
        rewards=table.column("reward").to_numpy(zero_copy_only=False).astype(np.float32),
        next_obs=matrix("next_state_features", np.float32),
        terminal=table.column("terminal").to_numpy(zero_copy_only=False).astype(bool),
        next_action_mask=matrix("possible_next_actions", bool),
        propensity=table.column("action_probability").to_numpy(zero_copy_only=False).astype(np.float64),
    )
