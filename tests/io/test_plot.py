"""``distrl plot``: a real PNG of the expected size with something drawn; seeds of one config become
one mean line with a band, other configs their own line."""

from __future__ import annotations

from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

from distrl.io.plot import band, group_by_config, read_curve
from tests.helpers import CARTPOLE, distrl, train_ranks


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Two seeds of the shipped CartPole config, one run with another discount and the first seed
    on 2 ranks."""
    root = tmp_path_factory.mktemp("runs")
    settings = {
        "seed1": ["--seed", "1"],
        "seed2": ["--seed", "2"],
        "gamma": ["--seed", "1", "algo.gamma=0.95"],
        "two_ranks": ["--seed", "1"],
    }
    for name, extra in settings.items():
        args = [
            "--config", str(CARTPOLE), "--run-dir", str(root / name), "--total-steps", "4096",
            "train.stop_return=null", "log.tensorboard=false", *extra,
        ]  # fmt: skip
        result = train_ranks(2, *args) if name == "two_ranks" else distrl("train", *args)
        assert result.returncode == 0, result.stderr
    return [root / name for name in settings]


@pytest.mark.slow
def test_plot_writes_a_png_with_the_curves(runs: list[Path], tmp_path: Path) -> None:
    out = tmp_path / "figures" / "curves.png"
    result = distrl("plot", *map(str, runs), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "as 3 line(s)" in result.stdout  # the two seeds share one line
    image = matplotlib.image.imread(out)
    assert image.shape[:2] == (600, 1000)
    drawn = (image[..., :3] < 0.9).any(axis=-1)  # pixels that are not (near) white
    assert 0.005 < drawn.mean() < 0.5


@pytest.mark.slow
def test_seeds_of_one_config_and_rank_count_are_grouped_into_a_band(runs: list[Path]) -> None:
    curves = [read_curve(run, "episode_return_mean", "global_step") for run in runs]
    groups = group_by_config(curves)
    assert [[c.run_dir.name for c in g] for g in groups] == [["seed1", "seed2"], ["gamma"], ["two_ranks"]]
    grid, mean, low, high = band(groups[0])
    assert (low <= mean).all() and (mean <= high).all() and (low < high).any()
    first, second = groups[0]
    np.testing.assert_allclose(mean[0], (first.y[0] + second.y[0]) / 2)


def test_unknown_metric_names_the_known_ones(runs: list[Path], tmp_path: Path) -> None:
    result = distrl("plot", str(runs[0]), "--metric", "nope", "--out", str(tmp_path / "x.png"))
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "no values of 'nope'" in result.stderr and "episode_return_mean" in result.stderr
    assert not (tmp_path / "x.png").exists()


def test_a_dir_without_metrics_is_one_line(tmp_path: Path) -> None:
    result = distrl("plot", str(tmp_path), "--out", str(tmp_path / "x.png"))
    assert result.returncode == 2 and "no metrics.jsonl" in result.stderr
    assert str(tmp_path) in result.stderr
