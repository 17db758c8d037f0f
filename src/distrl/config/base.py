"""What every config section shares: strict keys, validated assignment, and the helpers for
pairs of keys of which the user sets one (a global or a per-rank size, say). Kept apart from
``distrl.config.run`` so that each algorithm's config can live next to its code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict


class Section(BaseModel):
    # Each field's docstring is its description (the configuration reference is built from them).
    model_config = ConfigDict(extra="forbid", validate_assignment=True, use_attribute_docstrings=True)


def default_unless_either(data: Any, key: str, alternative: str, default: int) -> Any:
    """Fill ``key`` with its default when the user gave neither it nor its alternative."""
    if isinstance(data, dict) and data.get(key) is None and data.get(alternative) is None:
        return {**data, key: default}
    return data


def at_most_one(section: Section, name: str, key: str, alternative: str) -> Any:
    if getattr(section, key) is not None and getattr(section, alternative) is not None:
        raise ValueError(
            f"{name}.{key} and {name}.{alternative} exclude each other; set one ({name}.{key}=null clears it)"
        )
    return section


@dataclass(frozen=True)
class Size:
    """One of a run's sizes as ``distrl config`` shows it: over all ranks and on each."""

    name: str
    total: int
    per_rank: list[int]
