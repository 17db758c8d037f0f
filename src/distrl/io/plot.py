"""Learning curves from run dirs (``distrl plot``): one line per config, runs that differ only in
their seed drawn as their mean with a min-max band."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from distrl.errors import UserError

X_AXES = ("global_step", "time_s")
_POINTS = 200
"""Points of a group's common x grid (its runs are interpolated onto it)."""


@dataclass
class Curve:
    run_dir: Path
    x: np.ndarray
    y: np.ndarray
    ranks: int | None
    """Ranks of the run's first logged update (the same config on more ranks is another line)."""


def read_curve(run_dir: Path, metric: str, x: str) -> Curve:
    """``metric`` against ``x`` from ``run_dir``'s metrics.jsonl, rows without a finite value left out."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise UserError(
            f"{run_dir}: no metrics.jsonl (not a run dir, or it never logged)", code="plot-no-metrics"
        )
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    points = [
        (row[x], row[metric])
        for row in rows
        if isinstance(row.get(metric), int | float) and math.isfinite(row[metric]) and x in row
    ]
    if not points:
        known = sorted({k for row in rows for k, v in row.items() if isinstance(v, int | float)})
        raise UserError(
            f"{path}: no values of {metric!r}; its metrics are {', '.join(known)}", code="plot-metric-unknown"
        )
    xs, ys = np.array(points, dtype=np.float64).T
    return Curve(run_dir, xs, ys, rows[0].get("ranks"))


def config_without_seed(run_dir: Path) -> str:
    """The run's resolved config (its config.yaml) less ``train.seed``: runs of one config share it."""
    path = run_dir / "config.yaml"
    config = yaml.safe_load(path.read_text()) if path.is_file() else {}
    config.get("train", {}).pop("seed", None)
    return json.dumps(config, sort_keys=True)


def group_by_config(curves: list[Curve]) -> list[list[Curve]]:
    """Curves grouped by config and number of ranks (seeds together), in the order their first
    run was given."""
    groups: dict[tuple[str, int | None], list[Curve]] = {}
    for curve in curves:
        groups.setdefault((config_without_seed(curve.run_dir), curve.ranks), []).append(curve)
    return list(groups.values())


def band(group: list[Curve]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x, mean, min, max) of the group's runs on a common grid up to where all of them reach."""
    start = max(c.x[0] for c in group)
    stop = min(c.x[-1] for c in group)
    grid = np.linspace(start, stop, _POINTS) if stop > start else np.array([start])
    ys = np.stack([np.interp(grid, c.x, c.y) for c in group])
    return grid, ys.mean(axis=0), ys.min(axis=0), ys.max(axis=0)


def _label(group: list[Curve]) -> str:
    """A run's dir name; for seeds of one config, what their names share (``run_s1``, ``run_s2`` ->
    ``run_s``) and how many there are."""
    names = [c.run_dir.name for c in group]
    if len(names) == 1:
        return names[0]
    shared = os.path.commonprefix(names).rstrip("-_.") or names[0]
    return f"{shared} ({len(names)} seeds)"


def plot_runs(run_dirs: list[Path], metric: str, x: str, out: Path) -> int:
    """Write the figure to ``out`` (PNG, 1000 x 600 pixels); return the number of lines drawn."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    groups = group_by_config([read_curve(run_dir, metric, x) for run_dir in run_dirs])
    figure, axes = plt.subplots(figsize=(10, 6), dpi=100)
    for group in groups:
        label = _label(group)
        if len(group) == 1:
            axes.plot(group[0].x, group[0].y, label=label)
            continue
        grid, mean, low, high = band(group)
        (line,) = axes.plot(grid, mean, label=f"{label}, mean")
        axes.fill_between(grid, low, high, color=line.get_color(), alpha=0.25, linewidth=0)
    axes.set_xlabel("env steps" if x == "global_step" else "seconds")
    axes.set_ylabel(metric)
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        figure.savefig(out, format="png")
    except OSError as exc:
        raise UserError(
            f"--out {out}: cannot write: {exc.strerror or exc}", code="plot-out-unwritable"
        ) from None
    finally:
        plt.close(figure)
    return len(groups)
