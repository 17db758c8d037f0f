"""distrl collect: ReAgent's columns, exact propensities, several files with row groups,
reproducible from its seed; continuous actions as float lists with the env's bounds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from distrl.data.schema import CONTINUOUS_SCHEMA, SCHEMA
from tests.helpers import CARTPOLE, PENDULUM_SAC, distrl


def collect(out: Path, *args: str) -> None:
    result = distrl("collect", "--env", "CartPole-v1", "--steps", "1000", "--out", str(out), *args)
    assert result.returncode == 0, result.stderr


@pytest.mark.slow
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


@pytest.mark.slow
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
    ],
)
def test_bad_collect_input_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    base = {"--env": "CartPole-v1", "--steps": "10", "--out": str(tmp_path / "out")}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    result = distrl("collect", *[x for pair in base.items() for x in pair])
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert message in result.stderr


@pytest.mark.slow
def test_collect_refuses_a_dataset_dir_that_is_not_empty(tmp_path: Path) -> None:
    collect(tmp_path / "a")
    before = sorted(p.name for p in (tmp_path / "a").iterdir())
    result = distrl("collect", "--env", "CartPole-v1", "--steps", "10", "--out", str(tmp_path / "a"))
    assert result.returncode == 2 and "not empty" in result.stderr
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == before  # nothing lost
    assert json.dumps(before)


@pytest.mark.slow
def test_continuous_actions_are_logged_as_vectors_with_the_envs_bounds(tmp_path: Path) -> None:
    run = tmp_path / "sac-run"
    trained = distrl("train", "--config", str(PENDULUM_SAC), "--run-dir", str(run), "--total-steps", "300",
                     "train.stop_return=null", "log.tensorboard=false")  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    for name, policy in [
        ("random", "random"),
        ("mixed", f"epsilon-greedy:{run}:0.5"),
        ("sac", f"checkpoint:{run}"),
    ]:
        result = distrl("collect", "--env", "Pendulum-v1", "--steps", "400", "--out", str(tmp_path / name),
                        "--policy", policy)  # fmt: skip
        assert result.returncode == 0, result.stderr
    tables = {name: pq.read_table(tmp_path / name) for name in ("random", "mixed", "sac")}
    for table in tables.values():
        assert table.schema.remove_metadata().equals(CONTINUOUS_SCHEMA)
        assert table.schema.metadata == {b"distrl.action_low": b"[-2.0]", b"distrl.action_high": b"[2.0]"}
        assert table.column("action_probability").null_count == 400  # densities are not logged
    actions = {name: np.array(t.column("action").to_pylist()) for name, t in tables.items()}
    assert all(a.shape == (400, 1) and np.abs(a).max() <= 2.0 for a in actions.values())
    # The checkpoint's deterministic actions reproduce from the observations; the mix holds both.
    from distrl.eval.policy import load_policy

    policy = load_policy(run).policy
    obs = {name: np.array(t.column("state_features").to_pylist(), np.float32) for name, t in tables.items()}
    with torch.no_grad():
        greedy = {name: policy(torch.from_numpy(o)).numpy() for name, o in obs.items()}
    np.testing.assert_allclose(actions["sac"], greedy["sac"], atol=1e-6)
    from_policy = np.isclose(actions["mixed"], greedy["mixed"], atol=1e-6)[:, 0].mean()
    assert 0.4 < from_policy < 0.6
