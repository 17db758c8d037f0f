"""distrl collect: ReAgent's columns, exact propensities, several files with row groups,
reproducible from its seed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from distrl.data.schema import SCHEMA
from tests.helpers import CARTPOLE, distrl


def collect(out: Path, *args: str) -> None:
    result = distrl("collect", "--env", "CartPole-v1", "--steps", "1000", "--out", str(out), *args)
    assert result.returncode == 0, result.stderr


def test_random_dataset_is_reproducible_with_exact_propensities(tmp_path: Path) -> None:
    collect(tmp_path / "a", "--rows-per-file", "300", "--seed", "7")
    collect(tmp_path / "b", "--rows-per-file", "300", "--seed", "7")
    files = sorted((tmp_path / "a").glob("*.parquet"))
    assert [f.name for f in files] == [f"part-0000{i}.parquet" for i in range(4)]  # 300+300+300+100
    assert [pq.ParquetFile(f).metadata.num_row_groups for f in files] == [4, 4, 4, 2]
    tables = [pq.read_table(f) for f in files]
    assert all(t.schema.equals(SCHEMA) for t in tables)
    for f in files:  # the same seed gives the same bytes' worth of rows
        assert pq.read_table(f).equals(pq.read_table(tmp_path / "b" / f.name))
    rows = [r for t in tables for r in t.to_pylist()]
    assert len(rows) == 1000
    assert {r["action_probability"] for r in rows} == {0.5}
    # Consecutive rows of one env continue each other; terminal rows allow no next action.
    by_mdp: dict[str, list[dict]] = {}
    for row in rows:
        by_mdp.setdefault(row["mdp_id"], []).append(row)
    for episode in by_mdp.values():
        assert [r["sequence_number"] for r in episode] == list(range(len(episode)))
        for before, after in zip(episode, episode[1:], strict=False):
            np.testing.assert_allclose(before["next_state_features"], after["state_features"])
        for row in episode:
            assert row["possible_next_actions"] == [not row["terminal"]] * 2


def test_epsilon_greedy_logs_the_probability_of_each_logged_action(tmp_path: Path) -> None:
    run = tmp_path / "run"
    trained = distrl("train", "--config", str(CARTPOLE), "--run-dir", str(run), "--total-steps", "2048",
                     "train.stop_return=null", "log.tensorboard=false")  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    collect(tmp_path / "eps", "--policy", f"epsilon-greedy:{run}:0.3")
    rows = pq.read_table(tmp_path / "eps").to_pylist()
    # Greedy action: 0.7 + 0.3 / 2; the other: 0.3 / 2.
    assert {round(r["action_probability"], 9) for r in rows} == {0.85, 0.15}
    collect(tmp_path / "det", "--policy", f"checkpoint:{run}")
    assert {r["action_probability"] for r in pq.read_table(tmp_path / "det").to_pylist()} == {None}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--policy", "softmax"], "--policy 'softmax': expected random, epsilon-greedy:CHECKPOINT:EPS"),
        (["--policy", "epsilon-greedy:runs/x:2"], "EPS in [0, 1]"),
        (["--steps", "0"], "--steps 0: must be at least 1"),
        (["--env", "Pendulum-v1"], "collect needs Discrete actions"),
    ],
)
def test_bad_collect_input_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    base = {"--env": "CartPole-v1", "--steps": "10", "--out": str(tmp_path / "out")}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    result = distrl("collect", *[x for pair in base.items() for x in pair])
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert message in result.stderr


def test_collect_refuses_a_dataset_dir_that_is_not_empty(tmp_path: Path) -> None:
    collect(tmp_path / "a")
    before = sorted(p.name for p in (tmp_path / "a").iterdir())
    result = distrl("collect", "--env", "CartPole-v1", "--steps", "10", "--out", str(tmp_path / "a"))
    assert result.returncode == 2 and "not empty" in result.stderr
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == before  # nothing lost
    assert json.dumps(before)
