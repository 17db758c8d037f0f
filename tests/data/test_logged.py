"""Reading logged data: every row exactly once per epoch over the ranks, under files and row
groups as units; malformed rows reported with file, row and column."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from distrl.data.logged import LoggedDataset, ShuffledStream, ranks_sharing_a_copy
from distrl.errors import UserError
from tests.helpers import distrl


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("data") / "cartpole"
    result = distrl(
        "collect", "--env", "CartPole-v1", "--steps", "2000", "--out", str(out), "--rows-per-file", "600"
    )
    assert result.returncode == 0, result.stderr
    return out  # 4 files (600, 600, 600, 200 rows), 4 row groups each but the last (2)


def row_ids(rows) -> list[tuple]:
    """Rows are told apart by their state and action (all distinct in a random CartPole log)."""
    return [(tuple(o.tolist()), int(a)) for o, a in zip(rows.obs, rows.actions, strict=True)]


def all_row_ids(data: LoggedDataset) -> list[tuple]:
    return [r for unit in data.units(1) for r in row_ids(data.read(unit))]


@pytest.mark.parametrize(
    ("world_size", "unit"), [(2, "file"), (3, "file"), (5, "row group"), (8, "row group")]
)
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
    bad_file = write_bad(dataset, tmp_path / "bad", 170, column, value)
    data = LoggedDataset(tmp_path / "bad")
    data.read(data.row_groups[0])  # rows 0-149 are fine
    with pytest.raises(UserError) as info:
        data.read(data.row_groups[1])  # rows 150-299 hold the bad one
    assert str(info.value).startswith(f"{bad_file}: row 170: {problem}")
    skipping = LoggedDataset(tmp_path / "bad", on_bad_row="skip")
    assert sum(len(skipping.read(u)) for u in skipping.units(1)) == 599 and skipping.skipped_rows == 1


def test_a_missing_column_is_named(dataset: Path, tmp_path: Path) -> None:
    (tmp_path / "nocol").mkdir()
    table = pq.read_table(sorted(dataset.glob("*.parquet"))[0]).drop_columns(["reward"])
    pq.write_table(table, tmp_path / "nocol" / "part-00000.parquet")
    with pytest.raises(UserError, match="part-00000.parquet: column reward is missing"):
        LoggedDataset(tmp_path / "nocol")


@pytest.mark.parametrize("layout", ["copy", "split"])
def test_every_row_once_per_epoch_under_both_layouts(dataset: Path, tmp_path: Path, layout: str) -> None:
    """4 ranks on 2 nodes. ``copy``: every node holds the whole dataset and all 4 ranks divide it;
    ``split``: node 1 holds a dataset of its own and each node's 2 ranks divide their node's."""
    other = tmp_path / "node1"
    result = distrl("collect", "--env", "CartPole-v1", "--steps", "900", "--out", str(other), "--seed", "7")
    assert result.returncode == 0, result.stderr
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
