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

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from distrl.data.schema import ACTION_HIGH, ACTION_LOW, CONTINUOUS_REQUIRED, PARAMETRIC_REQUIRED, REQUIRED
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
    """Discrete and parametric: [rows] indices; continuous: [rows, action floats]."""
    next_action_mask: np.ndarray
    """Discrete: the actions possible next. Parametric: which of ``next_candidates`` are real.
    Continuous: [rows, 0]."""
    propensity: np.ndarray
    """The logger's probability of the logged action; NaN where it was deterministic (null)."""
    candidates: np.ndarray | None = None
    """Parametric actions only: [rows, K, action features] of each row's candidates, padded to
    the largest set (``candidate_mask`` marks real ones); ``actions`` index into it."""
    candidate_mask: np.ndarray | None = None
    next_candidates: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.actions)

    def take(self, idx: np.ndarray) -> Rows:
        return Rows(*(None if v is None else v[idx] for v in self._values()))

    def without(self, idx: np.ndarray) -> Rows:
        """These rows but rows ``idx`` (distinct), in place and in O(len(idx)): the last rows
        move into the holes, so the order changes (a shuffle buffer's order does not matter)."""
        stay = len(self) - len(idx)
        holes = idx[idx < stay]
        tail = np.arange(stay, len(self))
        movers = tail[~np.isin(tail, idx)]
        for value in self._values():
            if value is not None:
                value[holes] = value[movers]
        return Rows(*(None if v is None else v[:stay] for v in self._values()))

    def _values(self) -> list[np.ndarray | None]:
        return [getattr(self, f) for f in self.__dataclass_fields__]

    @staticmethod
    def empty(
        obs_dim: int, num_actions: int, action_dim: int | None = None, action_size: int | None = None
    ) -> Rows:
        """No rows; ``action_dim`` given: parametric rows with that many action features;
        ``action_size`` given: continuous actions of that many floats."""
        empty = Rows(
            np.zeros((0, obs_dim), np.float32),
            np.zeros(0, np.int64) if action_size is None else np.zeros((0, action_size), np.float32),
            np.zeros(0, np.float32),
            np.zeros((0, obs_dim), np.float32),
            np.zeros(0, bool),
            np.zeros((0, num_actions), bool),
            np.zeros(0),
        )
        if action_dim is not None:
            empty.candidates = empty.next_candidates = np.zeros((0, 1, action_dim), np.float32)
            empty.candidate_mask = empty.next_action_mask = np.zeros((0, 1), bool)
        return empty

    @staticmethod
    def concat(parts: list[Rows]) -> Rows:
        """The rows of ``parts`` in order; candidate sets padded to the largest among them."""
        columns = zip(*(part._values() for part in parts), strict=True)
        return Rows(*(None if values[0] is None else _concat_padded(values) for values in columns))


def _concat_padded(arrays: tuple[np.ndarray, ...]) -> np.ndarray:
    """Concatenate along rows, padding axis 1 of [rows, K, ...] arrays (zeros / False) to the
    largest K; arrays of one width (features, discrete masks) are concatenated as they are."""
    if arrays[0].ndim < 2 or len({a.shape[1] for a in arrays}) == 1:
        return np.concatenate(arrays)
    width = max(a.shape[1] for a in arrays)
    return np.concatenate(
        [np.pad(a, [(0, 0), (0, width - a.shape[1])] + [(0, 0)] * (a.ndim - 2)) for a in arrays]
    )


class LoggedDataset:
    def __init__(self, path: Path, on_bad_row: str = "error") -> None:
        files = sorted(path.glob("*.parquet")) if path.is_dir() else []
        if not files:
            raise UserError(
                f"--data {path}: no .parquet files there; give a .parquet file or a directory of them",
                code="data-no-parquet-files",
            )
        self.on_bad_row = on_bad_row
        schema = _open(files[0]).schema_arrow
        self.parametric = "action_features" in schema.names
        """Rows carry candidate sets with action features instead of discrete masks."""
        self.continuous = "action" in schema.names and pa.types.is_list(schema.field("action").type)
        """Rows carry continuous actions: a list of floats each, no masks."""
        self.skipped_rows = 0
        self.whole_files: list[Unit] = []
        self._file_row_groups: dict[Path, list[Unit]] = {}
        for file in files:  # each file's footer is read once, here
            parquet = _open(file)
            self._check_columns(file, parquet.schema_arrow)
            groups = self._file_row_groups[file] = []
            first_row = 0
            for group in range(parquet.metadata.num_row_groups):
                rows = parquet.metadata.row_group(group).num_rows
                groups.append(Unit(file, group, rows, first_row))
                first_row += rows
            self.whole_files.append(Unit(file, None, parquet.metadata.num_rows))
        self.row_groups = [group for groups in self._file_row_groups.values() for group in groups]
        first = _read(self.row_groups[0])
        self.obs_dim = len(first.column("state_features")[0])
        self.action_dim: int | None = None
        """Parametric actions: features per action (None: discrete actions)."""
        self.num_actions = 0
        """Discrete actions: how many (0 for parametric actions)."""
        self.action_bounds: tuple[list[float], list[float]] | None = None
        """Continuous actions: each dimension's (low, high)."""
        if self.parametric:
            self.action_dim = len(first.column("action_features")[0])
        elif self.continuous:
            self.action_bounds = _action_bounds(files, schema, len(first.column("action")[0]))
        else:
            self.num_actions = len(first.column("possible_actions")[0])

    def action_space(self) -> gym.spaces.Space:
        """Discrete(n); for parametric actions a Box of one action's features; for continuous
        actions the Box of their bounds."""
        if self.action_bounds is not None:
            low, high = self.action_bounds
            return gym.spaces.Box(np.array(low, np.float32), np.array(high, np.float32), dtype=np.float32)
        if self.action_dim is None:
            return gym.spaces.Discrete(self.num_actions)
        return gym.spaces.Box(-np.inf, np.inf, (self.action_dim,), dtype=np.float32)

    def empty_rows(self) -> Rows:
        action_size = None if self.action_bounds is None else len(self.action_bounds[0])
        return Rows.empty(self.obs_dim, self.num_actions, self.action_dim, action_size)

    def summary(self) -> list[tuple[str, int]]:
        """(file name, rows) of every file: what two copies of a dataset must agree on."""
        return [(unit.path.name, unit.rows) for unit in self.whole_files]

    def pieces(self, unit: Unit) -> list[Unit]:
        """The row groups ``unit`` is read in: a whole file is never decoded at once."""
        return self._file_row_groups[unit.path] if unit.row_group is None else [unit]

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
                    "(data.on_bad_row=skip drops such rows)",
                    code="data-bad-row",
                )
            self.skipped_rows += len({r for r, _, _ in bad})
            keep = np.ones(len(table), dtype=bool)
            keep[[r for r, _, _ in bad]] = False
            table = table.filter(pa.array(keep))
        return _decode(table, self.action_dim, self.continuous)

    def _check_columns(self, file: Path, schema: pa.Schema) -> None:
        if self.parametric:
            required, kind = PARAMETRIC_REQUIRED, "a parametric-action dataset"
        elif self.continuous:
            required, kind = CONTINUOUS_REQUIRED, "a continuous-action dataset"
        else:
            required, kind = REQUIRED, "a dataset"
        missing = [c for c in required if c not in schema.names]
        if missing:
            raise UserError(
                f"{file}: column {missing[0]} is missing ({kind} needs {', '.join(required)})",
                code="data-column-missing",
            )

    def _bad_rows(self, table: pa.Table) -> list[tuple[int, str, str]]:
        """(row, column, problem) of every malformed row, in row order."""
        problems: list[tuple[int, str, str]] = []
        widths = dict.fromkeys(FLOAT_LISTS, self.obs_dim)
        if self.action_dim is not None:
            widths["action_features"] = self.action_dim
        if self.action_bounds is not None:
            widths["action"] = len(self.action_bounds[0])
        for column, width in widths.items():
            lengths = pc.list_value_length(table.column(column)).to_numpy(zero_copy_only=False)
            for row in np.flatnonzero(lengths != width):
                problems.append((int(row), column, f"{lengths[row]} features, not {width}"))
            values = _list_matrix(table.column(column), width, lengths)
            for row in np.flatnonzero(~np.isfinite(values).all(axis=1)):
                problems.append((int(row), column, "not a finite number"))
            if column == "action":  # continuous: the decoded actions checked against the bounds too
                problems += self._out_of_bounds(values)
        reward = table.column("reward").to_numpy(zero_copy_only=False).astype(np.float64)
        for row in np.flatnonzero(~np.isfinite(reward)):
            problems.append((int(row), "reward", "not a finite number"))
        propensity = table.column("action_probability").to_numpy(zero_copy_only=False).astype(np.float64)
        given = ~np.isnan(propensity)
        for row in np.flatnonzero(given & ~((propensity > 0) & (propensity <= 1))):
            problems.append((int(row), "action_probability", f"{propensity[row]} is outside (0, 1]"))
        if self.action_bounds is not None:
            return sorted(problems)
        actions = table.column("action").to_numpy(zero_copy_only=False)
        if self.parametric:
            problems += self._bad_candidates(table, actions)
        else:
            problems += self._bad_masks(table, actions)
        return sorted(problems)

    def _out_of_bounds(self, actions: np.ndarray) -> list[tuple[int, str, str]]:
        """Continuous rows whose action (``[rows, width]``, NaN where a row's length is wrong)
        lies outside the bounds; rows of the wrong length or not finite are reported as such."""
        assert self.action_bounds is not None
        low, high = (np.asarray(bound) for bound in self.action_bounds)
        outside = ((actions < low) | (actions > high)).any(axis=1)
        return [(int(row), "action", f"outside the bounds {low.tolist()} to {high.tolist()}")
                for row in np.flatnonzero(outside)]  # fmt: skip

    def _bad_masks(self, table: pa.Table, actions: np.ndarray) -> list[tuple[int, str, str]]:
        problems = []
        for column in MASK_LISTS:
            lengths = pc.list_value_length(table.column(column)).to_numpy(zero_copy_only=False)
            for row in np.flatnonzero(lengths != self.num_actions):
                problems.append((int(row), column, f"{lengths[row]} entries for {self.num_actions} actions"))
        possible = table.column("possible_actions").to_pylist()
        for row, action in enumerate(actions):
            mask = possible[row]
            if not (0 <= action < self.num_actions) or (len(mask) == self.num_actions and not mask[action]):
                problems.append((row, "action", f"action {action} is not among the possible actions"))
        return problems

    def _bad_candidates(self, table: pa.Table, actions: np.ndarray) -> list[tuple[int, str, str]]:
        """Parametric rows: candidates of the right length and finite, the logged action among
        them, and next candidates wherever the episode goes on."""
        assert self.action_dim is not None
        counts, problems = _candidate_problems(table, "possible_actions_features", self.action_dim)
        next_counts, next_problems = _candidate_problems(
            table, "possible_next_actions_features", self.action_dim
        )
        terminal = table.column("terminal").to_numpy(zero_copy_only=False).astype(bool)
        for row in np.flatnonzero(counts == 0):
            problems.append((int(row), "possible_actions_features", "no candidates"))
        for row in np.flatnonzero((counts > 0) & ((actions < 0) | (actions >= counts))):
            problems.append(
                (int(row), "action", f"action {actions[row]} is not one of {counts[row]} candidates")
            )
        for row in np.flatnonzero((next_counts == 0) & ~terminal):
            problems.append(
                (int(row), "possible_next_actions_features", "no candidates for a state that is not terminal")
            )
        return problems + next_problems


def ranks_sharing_a_copy(layout: str, node_of_rank: list[int], rank: int) -> list[int]:
    """The ranks that divide the copy of the data ``rank`` reads: all of them under ``copy``, the
    ranks of its own node under ``split``."""
    if layout == "copy":
        return list(range(len(node_of_rank)))
    return [r for r, node in enumerate(node_of_rank) if node == node_of_rank[rank]]


def node_shares(nodes_per_rank: list[list[str]], rank: int) -> list[tuple[int, int]]:
    """``data.layout=split`` read by data workers: the node each rank's workers run on, by rank
    and worker; for each of ``rank``'s workers, (its index, the count) among the workers of every
    rank on its node, which divide that node's part."""
    readers = [(r, w) for r, nodes in enumerate(nodes_per_rank) for w in range(len(nodes))]
    shares = []
    for w, node in enumerate(nodes_per_rank[rank]):
        on_node = [(r, i) for r, i in readers if nodes_per_rank[r][i] == node]
        shares.append((on_node.index((rank, w)), len(on_node)))
    return shares


class ShuffledStream:
    """One rank's rows, epoch after epoch: units in a fresh order each epoch, read a row group at
    a time into a buffer of ``buffer_rows`` rows (one batch, if that is more); each batch is a
    uniformly random subset of the buffer, so every row of the shard comes out once per epoch and
    a rank holds about ``buffer_rows`` rows whatever the size of its files."""

    def __init__(self, dataset: LoggedDataset, units: list[Unit], buffer_rows: int, seed: int) -> None:
        self.dataset = dataset
        self.units = units
        self.buffer_rows = buffer_rows
        self.seed = seed
        self.rows_per_epoch = sum(u.rows for u in units)

    def batches_per_epoch(self, batch_size: int) -> int:
        return -(-self.rows_per_epoch // batch_size)

    def batches(self, batch_size: int, epoch: int) -> Iterator[Rows]:
        """Epoch ``epoch``'s rows in batches of ``batch_size`` (the last one smaller)."""
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(len(self.units))
        pieces = (piece for i in order for piece in self.dataset.pieces(self.units[i]))
        fill_to = max(self.buffer_rows, batch_size)
        buffer: Rows | None = None
        exhausted = False
        while True:
            while not exhausted and (buffer is None or len(buffer) < fill_to):
                piece = next(pieces, None)
                if piece is None:
                    exhausted = True
                    break
                rows = self.dataset.read(piece)
                buffer = rows if buffer is None else Rows.concat([buffer, rows])
            if buffer is None or len(buffer) == 0:
                break
            picked = rng.choice(len(buffer), size=min(batch_size, len(buffer)), replace=False)
            yield buffer.take(picked)
            buffer = buffer.without(picked)


def _open(path: Path) -> pq.ParquetFile:
    try:
        return pq.ParquetFile(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise UserError(
            f"{path}: not a readable Parquet file ({exc})", code="data-parquet-unreadable"
        ) from None


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


def _candidate_problems(
    table: pa.Table, column: str, width: int
) -> tuple[np.ndarray, list[tuple[int, str, str]]]:
    """Each row's number of candidates in ``column``, and (row, column, problem) where a candidate
    has the wrong number of features or a feature that is not a finite number."""
    sets = table.column(column)
    counts = pc.fill_null(pc.list_value_length(sets), 0).to_numpy(zero_copy_only=False)
    candidates = pc.list_flatten(sets)
    lengths = pc.fill_null(pc.list_value_length(candidates), 0).to_numpy(zero_copy_only=False)
    row_of_candidate = np.repeat(np.arange(len(counts)), counts)
    problems = [(int(row), column, f"a candidate with {lengths[row_of_candidate == row][0]} features, "
                 f"not {width}") for row in np.unique(row_of_candidate[lengths != width])]  # fmt: skip
    values = pc.list_flatten(candidates).to_numpy(zero_copy_only=False).astype(np.float64)
    row_of_value = np.repeat(row_of_candidate, lengths)
    problems += [
        (int(row), column, "not a finite number") for row in np.unique(row_of_value[~np.isfinite(values)])
    ]
    return counts, problems


def _candidate_matrix(column: pa.ChunkedArray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Validated candidate sets as [rows, K, width] features padded to the largest set, and the
    [rows, K] mask of real candidates."""
    counts = pc.list_value_length(column).to_numpy(zero_copy_only=False)
    values = pc.list_flatten(pc.list_flatten(column)).to_numpy(zero_copy_only=False)
    mask = np.arange(max(counts.max(initial=0), 1)) < counts[:, None]
    features = np.zeros((*mask.shape, width), np.float32)
    features[mask] = values.reshape(-1, width)
    return features, mask


def _action_bounds(files: list[Path], schema: pa.Schema, size: int) -> tuple[list[float], list[float]]:
    """Continuous actions' bounds: the schema's metadata (``distrl collect`` writes the env's),
    else the finite minima and maxima over every file's action column (that column alone read)."""
    metadata = schema.metadata or {}
    if ACTION_LOW in metadata and ACTION_HIGH in metadata:
        low, high = json.loads(metadata[ACTION_LOW]), json.loads(metadata[ACTION_HIGH])
        if len(low) != size or len(high) != size:
            raise UserError(
                f"{files[0]}: the action bounds in the schema's metadata have {len(low)} and {len(high)} "
                f"values for actions of {size}",
                code="data-action-bounds-mismatch",
            )
        return [float(x) for x in low], [float(x) for x in high]
    low, high = np.full(size, np.inf), np.full(size, -np.inf)
    for file in files:
        column = pq.read_table(file, columns=["action"]).column("action")
        lengths = pc.list_value_length(column).to_numpy(zero_copy_only=False)
        actions = _list_matrix(column, size, lengths)
        finite = np.where(np.isfinite(actions), actions, np.nan)
        if np.isfinite(finite).any():
            low, high = np.fmin(low, np.nanmin(finite, axis=0)), np.fmax(high, np.nanmax(finite, axis=0))
    return low.tolist(), high.tolist()


def _decode(table: pa.Table, action_dim: int | None, continuous: bool = False) -> Rows:
    n = len(table)

    def matrix(column: str, dtype: type) -> np.ndarray:
        flat = pc.list_flatten(table.column(column)).to_numpy(zero_copy_only=False)
        return flat.astype(dtype).reshape(n, -1) if n else np.zeros((0, 0), dtype=dtype)

    def vector(column: str, dtype: type) -> np.ndarray:
        return table.column(column).to_numpy(zero_copy_only=False).astype(dtype)

    common = {
        "obs": matrix("state_features", np.float32),
        "actions": matrix("action", np.float32) if continuous else vector("action", np.int64),
        "rewards": vector("reward", np.float32),
        "next_obs": matrix("next_state_features", np.float32),
        "terminal": vector("terminal", bool),
        "propensity": vector("action_probability", np.float64),
    }
    if continuous:
        return Rows(**common, next_action_mask=np.zeros((n, 0), bool))
    if action_dim is None:
        return Rows(**common, next_action_mask=matrix("possible_next_actions", bool))
    candidates, candidate_mask = _candidate_matrix(table.column("possible_actions_features"), action_dim)
    next_candidates, next_mask = _candidate_matrix(table.column("possible_next_actions_features"), action_dim)
    return Rows(
        **common,
        next_action_mask=next_mask,
        candidates=candidates,
        candidate_mask=candidate_mask,
        next_candidates=next_candidates,
    )
