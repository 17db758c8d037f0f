"""Pick the reader for ``--data``: a Minari dataset or a directory of Parquet files with
ReAgent's columns. Both offer the same interface (units, shards, validated ``Rows``)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from distrl.data.logged import LoggedDataset
from distrl.errors import UserError

if TYPE_CHECKING:
    from distrl.data.minari_dataset import MinariLoggedDataset


def is_minari_dataset(path: Path) -> bool:
    """Minari keeps ``metadata.json`` in a dataset's ``data/``; either directory may be given."""
    return (path / "metadata.json").is_file() or (path / "data" / "metadata.json").is_file()


def open_dataset(path: Path, on_bad_row: str = "error") -> LoggedDataset | MinariLoggedDataset:
    """The dataset at ``path``: Minari's reader for a Minari dataset, else ``LoggedDataset``."""
    if not is_minari_dataset(path):
        return LoggedDataset(path, on_bad_row)
    try:  # minari is an optional extra: only Minari datasets need it
        from distrl.data.minari_dataset import MinariLoggedDataset
    except ModuleNotFoundError as exc:
        if exc.name != "minari":
            raise
        raise UserError(
            f"--data {path} is a Minari dataset: install the minari extra (pip install 'distrl[minari]')",
            code="data-minari-extra-missing",
        ) from None
    return MinariLoggedDataset(path, on_bad_row)
