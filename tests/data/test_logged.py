"""Reading logged data: every row exactly once per epoch over the ranks, under files and row
groups as units; malformed rows reported with file, row and column."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from distrl.data.logged import LoggedDataset, ShuffledStream, node_shares, ranks_sharing_a_copy
from distrl.data.recommendation import write_dataset
from distrl.errors import UserError
from tests.helpers import collect, distrl


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data") / "cartpole"
    collect(out, 2000, 600, seed=1)
    return out  # 4 files (600, 600, 600, 200 rows), 4 row groups each but the last (2)


def row_ids(rows) -> list[tuple]:
    """Rows are told apart by their state and action (all distinct in a random CartPole log)."""
    return [(tuple(o.tolist()), int(a)) for o, a in zip(rows.obs, rows.actions, strict=True)]


def all_row_ids(data: LoggedDataset) -> list[tuple]:
    return [r for unit in data.units(1) for r in row_ids(data.read(unit))]


@pytest.mark.parametrize(
    ("world_size", "unit"), [(2, "file"), (3, "file"), (5, "row group"), (8, "row group")]
)
@pytest.mark.slow
def test_every_row_exactly_once_per_epoch_over_all_ranks(dataset: Path, world_size: int, unit: str) -> None:
    data = LoggedDataset(dataset)
    units = data.units(world_size)
    assert all((u.row_group is None) == (unit == "file") for u in units)
    everything = all_row_ids(data)
    assert len(everything) == len(set(everything)) == 2000
    for epoch in range(2):
        seen = []
        for rank in range(world_size):
            stream = ShuffledStream(data, data.shard(rank, world_size), buffer_rows=250, seed=rank)
            batches = list(stream.batches(64, epoch))
            assert all(len(b) == 64 for b in batches[:-1])  # only the last batch may be short
            seen += [r for b in batches for r in row_ids(b)]
        assert sorted(seen) == sorted(everything)  # each row once, on exactly one rank


def test_epochs_shuffle_differently(dataset: Path) -> None:
    data = LoggedDataset(dataset)
    stream = ShuffledStream(data, data.shard(0, 1), buffer_rows=2000, seed=0)
    first, second = (row_ids(next(stream.batches(50, epoch))) for epoch in (0, 1))
    assert first != second


def write_bad(dataset: Path, out: Path, row: int, column: str, value: object) -> Path:
    out.mkdir()
    table = pq.read_table(sorted(dataset.glob("*.parquet"))[1])
    values = table.column(column).to_pylist()
    values[row] = value
    table = table.set_column(
        table.schema.get_field_index(column), column, pa.array(values, table.schema.field(column).type)
    )
    pq.write_table(table, out / "part-00000.parquet", row_group_size=150)
    return out / "part-00000.parquet"


@pytest.mark.parametrize(
    ("column", "value", "problem"),
    [
        ("state_features", [0.1, 0.2], "column state_features: 2 features, not 4"),
        (
            "next_state_features",
            [0.1, float("nan"), 0.0, 0.0],
            "column next_state_features: not a finite number",
        ),
        ("action_probability", 1.5, "column action_probability: 1.5 is outside (0, 1]"),
        ("action", 3, "column action: action 3 is not among the possible actions"),
        ("possible_actions", [True], "column possible_actions: 1 entries for 2 actions"),
    ],
)
def test_a_malformed_row_is_reported_with_file_row_and_column(
    dataset: Path, tmp_path: Path, column: str, value: object, problem: str
) -> None:
    assert_reported(write_bad(dataset, tmp_path / "bad", 170, column, value), problem, rows=600)


def assert_reported(bad_file: Path, problem: str, rows: int) -> None:
    """Row 170 of ``bad_file`` (``rows`` rows, groups of 150) is malformed with ``problem``."""
    data = LoggedDataset(bad_file.parent)
    data.read(data.row_groups[0])  # rows 0-149 are fine
    with pytest.raises(UserError) as info:
        data.read(data.row_groups[1])  # rows 150-299 hold the bad one
    assert str(info.value).startswith(f"{bad_file}: row 170: {problem}")
    skipping = LoggedDataset(bad_file.parent, on_bad_row="skip")
    assert sum(len(skipping.read(u)) for u in skipping.units(1)) == rows - 1 and skipping.skipped_rows == 1


@pytest.fixture(scope="module")
def recommendations(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data") / "recommendation"
    write_dataset(out, rows=1200, rows_per_file=300, seed=0)
    return out


@pytest.mark.parametrize(
    ("column", "value", "problem"),
    [
        ("action_features", [0.1], "column action_features: 1 features, not 4"),
        (
            "possible_actions_features",
            [[0.1, 0.2]] * 8,
            "column possible_actions_features: a candidate with 2 features",
        ),
        (
            "possible_actions_features",
            [[0.0, float("inf"), 0.0, 0.0]] * 8,
            "column possible_actions_features: not a finite",
        ),
        ("possible_actions_features", [], "column possible_actions_features: no candidates"),
        ("action", 9, "column action: action 9 is not one of"),
        (
            "terminal",
            False,
            "column possible_next_actions_features: no candidates for a state that is not terminal",
        ),
    ],
)
def test_a_malformed_parametric_row_is_reported(
    recommendations: Path, tmp_path: Path, column: str, value: object, problem: str
) -> None:
    assert_reported(write_bad(recommendations, tmp_path / "bad", 170, column, value), problem, rows=300)


def test_parametric_rows_decode_to_padded_candidate_sets(recommendations: Path) -> None:
    data = LoggedDataset(recommendations)
    assert data.parametric and data.action_dim == 4 and data.num_actions == 0
    table = pq.read_table(sorted(recommendations.glob("*.parquet"))[0])
    rows = data.read(data.whole_files[0])
    counts = [len(c) for c in table.column("possible_actions_features").to_pylist()]
    assert rows.candidate_mask.sum(axis=1).tolist() == counts and rows.candidates.shape[1] == max(counts)
    logged = rows.candidates[np.arange(len(rows)), rows.actions]
    np.testing.assert_array_equal(logged, np.array(table.column("action_features").to_pylist(), np.float32))
    # Batches mixing parts with different largest sets are padded to the larger.
    stream = ShuffledStream(data, data.shard(0, 1), buffer_rows=500, seed=0)
    batch = next(stream.batches(1200, epoch=0))
    assert len(batch) == 1200 and batch.candidates.shape == (1200, 8, 4)
    assert (batch.candidate_mask.sum(axis=1) >= 2).all()


def test_a_missing_column_is_named(dataset: Path, tmp_path: Path) -> None:
    (tmp_path / "nocol").mkdir()
    table = pq.read_table(sorted(dataset.glob("*.parquet"))[0]).drop_columns(["reward"])
    pq.write_table(table, tmp_path / "nocol" / "part-00000.parquet")
    with pytest.raises(UserError, match="part-00000.parquet: column reward is missing"):
        LoggedDataset(tmp_path / "nocol")


@pytest.mark.parametrize("layout", ["copy", "split"])
@pytest.mark.slow
def test_every_row_once_per_epoch_under_both_layouts(dataset: Path, tmp_path: Path, layout: str) -> None:
    """4 ranks on 2 nodes. ``copy``: every node holds the whole dataset and all 4 ranks divide it;
    ``split``: node 1 holds a dataset of its own and each node's 2 ranks divide their node's."""
    other = tmp_path / "node1"
    collect(other, 900, 10_000, seed=7)
    node_of_rank = [0, 0, 1, 1]
    node_data = [LoggedDataset(dataset), LoggedDataset(dataset if layout == "copy" else other)]
    seen = []
    for rank, node in enumerate(node_of_rank):
        peers = ranks_sharing_a_copy(layout, node_of_rank, rank)
        data = node_data[node]
        stream = ShuffledStream(data, data.shard(peers.index(rank), len(peers)), buffer_rows=250, seed=rank)
        seen += [r for b in stream.batches(64, epoch=0) for r in row_ids(b)]
    distinct = node_data[:1] if layout == "copy" else node_data
    expected = [r for data in distinct for r in all_row_ids(data)]
    assert sorted(seen) == sorted(expected) and len(expected) == (2000 if layout == "copy" else 2900)


def test_data_workers_on_a_node_divide_its_part_over_every_rank() -> None:
    """``data.layout=split`` with data workers: rank 0's workers run on nodes a, b; rank 1's on b, a, b."""
    nodes = [["a", "b"], ["b", "a", "b"]]
    assert node_shares(nodes, 0) == [(0, 2), (0, 3)]
    assert node_shares(nodes, 1) == [(1, 3), (1, 2), (2, 3)]


@pytest.fixture(scope="module")
def pendulum(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data") / "pendulum"
    result = distrl("collect", "--env", "Pendulum-v1", "--steps", "1200", "--rows-per-file", "600",
                    "--out", str(out), "--seed", "2")  # fmt: skip
    assert result.returncode == 0, result.stderr
    return out  # 2 files of 600 rows, row groups of 150


def test_continuous_rows_decode_to_action_vectors_within_the_collected_bounds(pendulum: Path) -> None:
    data = LoggedDataset(pendulum)
    assert data.continuous and data.action_bounds == ([-2.0], [2.0])
    space = data.action_space()
    assert (space.low.tolist(), space.high.tolist(), space.shape) == ([-2.0], [2.0], (1,))
    rows = data.read(data.units(1)[0])
    assert rows.actions.dtype == np.float32 and rows.actions.shape == (600, 1)
    assert rows.next_action_mask.shape == (600, 0) and np.isnan(rows.propensity).all()
    logged = pq.read_table(data.units(1)[0].path).column("action").to_pylist()
    np.testing.assert_array_equal(rows.actions, np.array(logged, np.float32))
    assert data.empty_rows().actions.shape == (0, 1)


def test_continuous_bounds_without_metadata_are_the_datas_extremes(pendulum: Path, tmp_path: Path) -> None:
    table = pq.read_table(pendulum).replace_schema_metadata(None)
    (tmp_path / "bare").mkdir()
    pq.write_table(table, tmp_path / "bare" / "part-00000.parquet")
    actions = np.array(table.column("action").to_pylist())
    assert LoggedDataset(tmp_path / "bare").action_bounds == ([actions.min()], [actions.max()])


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ([2.5], "column action: outside the bounds [-2.0] to [2.0]"),
        ([0.1, 0.2], "column action: 2 features, not 1"),
        ([float("nan")], "column action: not a finite number"),
    ],
)
def test_a_malformed_continuous_row_is_reported(
    pendulum: Path, tmp_path: Path, value: object, problem: str
) -> None:
    assert_reported(write_bad(pendulum, tmp_path / "bad", 170, "action", value), problem, rows=600)
