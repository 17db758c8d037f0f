"""Offline DQN from logged Parquet data: learns, and trains data-parallel on 2 ranks with parts of
unequal size (equal gradient steps, identical parameters, rank 0 writing the final model)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from distrl.io import checkpoint as ckpt
from tests.eval.reference import reference_returns
from tests.helpers import CARTPOLE, OFFLINE, clean_env, collect, distrl, train_ranks
from tests.io.test_export import assert_file_acts_like_checkpoint


def start_two_nodes(tmp_path: Path, data: list[Path], *overrides: str) -> list[subprocess.Popen]:
    """Two "nodes" meeting through a shared file, one rank each, each reading its own ``--data``."""
    rendezvous = tmp_path / "shared" / "rendezvous"
    rendezvous.parent.mkdir(exist_ok=True)
    return [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distrl",
                "train",
                "--config",
                str(OFFLINE),
                "--data",
                str(path),
                "--run-dir",
                str(tmp_path / "run"),
                "--num-nodes",
                "2",
                "--node-index",
                str(index),
                "--rendezvous-file",
                str(rendezvous),
                "--procs-per-node",
                "1",
                *overrides,
            ],  # fmt: skip
            env=clean_env(),
            stderr=subprocess.PIPE,
            text=True,
        )
        for index, path in enumerate(data)
    ]


def train_on_unequal_parts(
    tmp_path: Path, gradient_steps: int, total_steps: int, *overrides: str
) -> list[dict]:
    """3 files of 1000, 1000 and 500 rows: rank 0 holds 1500 rows, rank 1 1000. With 64 samples
    per step (32 each) an epoch is ceil(1500 / 32) = 47 steps on both ranks. The metrics rows."""
    collect(tmp_path / "data", 2500, 1000)
    result = train_ranks(
        2, "--config", str(OFFLINE), "--data", str(tmp_path / "data"), "--run-dir", str(tmp_path / "run"),
        "algo.batch_size=64", f"algo.gradient_steps={gradient_steps}", "--total-steps", str(total_steps),
        "train.stop_return=null", "log.tensorboard=false", *overrides,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow
def test_two_ranks_share_a_dataset_of_unequal_parts(tmp_path: Path) -> None:
    rows = train_on_unequal_parts(
        tmp_path, 47, 7500, f"output.path={tmp_path / 'model' / 'policy.onnx'}", "eval.cpe_every=2"
    )
    # Each iteration is one epoch: every row once, so 2500 samples, then epoch 1, 2.
    assert [r["global_step"] for r in rows] == [2500, 5000, 7500]
    assert [r["epoch"] for r in rows] == [0, 1, 2]
    # Rank 0's counterfactual estimates, every second update.
    assert [math.isfinite(r.get("cpe/dr", math.nan)) for r in rows] == [False, True, False]
    state = json.loads((ckpt.resolve_checkpoint(tmp_path / "run") / "state.json").read_text())
    assert (
        state["algorithm"] == "dqn" and state["ranks"][0]["param_sha256"] == state["ranks"][1]["param_sha256"]
    )
    report = json.loads(
        distrl("eval", "--checkpoint", str(tmp_path / "run"), "--episodes", "2", "--json").stdout
    )
    # The final checkpoint's policy, its episodes played again apart from `distrl eval`.
    assert report["episodes"] == 2 and report["global_step"] == 7500
    assert report["returns"] == reference_returns(tmp_path / "run", 2)
    # ReAgent's node 0 saving the model: the final policy, one deployable file.
    assert_file_acts_like_checkpoint(tmp_path / "model" / "policy.onnx", tmp_path / "run")


@pytest.mark.slow
def test_a_rank_whose_part_ran_out_for_a_whole_iteration_still_joins_its_metrics(tmp_path: Path) -> None:
    # 5 steps an iteration: rank 1's 1000 rows last 32 of the epoch's 47 steps, so iterations
    # 8-10 (steps 35-46) have none of its samples, nor any statistic of its own.
    rows = train_on_unequal_parts(tmp_path, 5, 2500)
    assert [r["global_step"] for r in rows][-4:] == [2120, 2280, 2440, 2500]
    # Rank 0's own means, not halved by a rank with nothing to average.
    assert all(math.isfinite(r["td_loss"]) and r["q_mean"] > 0 for r in rows), [r["q_mean"] for r in rows]
    assert rows[-1]["q_mean"] > 0.5 * rows[-4]["q_mean"]


@pytest.mark.slow
def test_split_layout_each_node_trains_on_its_own_part(tmp_path: Path) -> None:
    # Node 0 holds 1500 rows (2 files), node 1 another 1000: with 64 samples per step (32 each)
    # an epoch is ceil(1500 / 32) = 47 steps and 2500 samples, every row of both parts once.
    collect(tmp_path / "node0", 1500, 1000, seed=0)
    collect(tmp_path / "node1", 1000, 1000, seed=1)
    nodes = start_two_nodes(
        tmp_path, [tmp_path / "node0", tmp_path / "node1"], "data.layout=split", "algo.batch_size=64",
        "algo.gradient_steps=47", "--total-steps", "5000", "train.stop_return=null", "log.tensorboard=false",
    )  # fmt: skip
    for node in nodes:
        _, stderr = node.communicate(timeout=300)
        assert node.returncode == 0, stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["global_step"], r["epoch"]) for r in rows] == [(2500, 0), (5000, 1)]


@pytest.mark.slow
def test_copy_layout_refuses_nodes_whose_copies_differ(tmp_path: Path) -> None:
    collect(tmp_path / "node0", 300, 300, seed=0)
    collect(tmp_path / "node1", 200, 200, seed=1)
    nodes = start_two_nodes(tmp_path, [tmp_path / "node0", tmp_path / "node1"], "train.stop_return=null")
    for node in nodes:
        _, stderr = node.communicate(timeout=120)
        assert node.returncode == 2, stderr[-3000:]
        assert stderr.strip().splitlines() == [
            f"distrl: error: data.layout=copy: node 1's dataset ({tmp_path / 'node1'}) differs from node "
            f"0's ({tmp_path / 'node0'}) in file names or row counts; if each node holds its own part, "
            "use data.layout=split"
        ]


@pytest.mark.slow
def test_a_resumed_run_continues_its_epoch_and_ends_where_an_uninterrupted_one_does(tmp_path: Path) -> None:
    """1 rank, 2500 rows, 64 per step: an epoch is 40 steps; iterations of 30 steps stop mid-epoch."""
    collect(tmp_path / "data", 2500, 1000)
    common = [
        "train", "--config", str(OFFLINE), "--data", str(tmp_path / "data"), "algo.batch_size=64",
        "algo.gradient_steps=30", "algo.target_update_interval=25", "train.stop_return=null",
        "log.tensorboard=false", "checkpoint.interval_steps=1920",
    ]  # fmt: skip
    whole = distrl(*common, "--run-dir", str(tmp_path / "whole"), "--total-steps", "5760")
    assert whole.returncode == 0, whole.stderr
    first = distrl(*common, "--run-dir", str(tmp_path / "resumed"), "--total-steps", "1920")
    assert first.returncode == 0, first.stderr
    second = distrl(*common, "--run-dir", str(tmp_path / "resumed"), "--total-steps", "5760", "--resume")
    assert second.returncode == 0, second.stderr
    # The final line: this launch's steps beside this launch's seconds, and no episode return
    # (learning from logged data ends no training episode).
    last = second.stdout.strip().splitlines()[-1]
    launch = "3848 logged transitions in this launch (resumed at 1920; 5768 in the whole run)"
    assert last.startswith(f"distrl: trained {launch} on 1 rank(s) in "), last
    assert "episode return" not in last, last

    def final(run: str) -> dict:
        return json.loads((ckpt.resolve_checkpoint(tmp_path / run) / "state.json").read_text())

    # Iterations of 30 steps take 1920, 1860 (580 + 1280 across the epoch's end) and 1860 samples;
    # the last one only the 2 steps the budget has left, not 30 more.
    assert final("whole")["global_step"] == final("resumed")["global_step"] == 5768
    assert final("whole")["ranks"][0]["param_sha256"] == final("resumed")["ranks"][0]["param_sha256"]


def logged_episode_returns(data: Path) -> list[float]:
    """The logging policy's own returns: rewards summed over each episode of the log that ended
    (terminal, or CartPole-v1's 500-step limit)."""
    table = pq.read_table(data, columns=["mdp_id", "reward", "terminal"])
    episodes = table.group_by("mdp_id").aggregate(
        [("reward", "sum"), ("reward", "count"), ("terminal", "max")]
    )
    return [
        total
        for total, length, ended in zip(
            *(episodes.column(c).to_pylist() for c in ("reward_sum", "reward_count", "terminal_max")),
            strict=True,
        )
        if ended or length == 500
    ]


@pytest.mark.learning(seeds=3)
@pytest.mark.slow
def test_two_ranks_learn_a_better_policy_than_the_epsilon_greedy_logger(tmp_path: Path, seed: int) -> None:
    """ReAgent's use: log a deployed policy with exploration, learn offline, beat it. The logger is
    a briefly trained PPO policy taking a random action 30% of the time (returns around 90)."""
    logger = tmp_path / "logger"
    trained = distrl(
        "train", "--config", str(CARTPOLE), "--seed", str(seed), "--run-dir", str(logger),
        "--total-steps", "8192",
        "train.stop_return=null", "log.tensorboard=false",
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr
    data = tmp_path / "data"
    logged = distrl(
        "collect", "--env", "CartPole-v1", "--policy", f"epsilon-greedy:{logger}:0.3", "--steps", "40000",
        "--out", str(data), "--rows-per-file", "10000",
    )  # fmt: skip
    assert logged.returncode == 0, logged.stderr
    result = train_ranks(
        2, "--config", str(OFFLINE), "--data", str(data), "--run-dir", str(tmp_path / "run"),
        "--total-steps", "800000", "algo.cql_alpha=0.2", "train.stop_return=null", "log.tensorboard=false",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(
        distrl("eval", "--checkpoint", str(tmp_path / "run"), "--episodes", "20", "--json").stdout
    )
    assert report["return_mean"] > float(np.mean(logged_episode_returns(data)))


@pytest.mark.learning(seeds=10, kept=1)
@pytest.mark.slow
def test_offline_dqn_from_random_transitions_far_outdoes_the_random_policy(tmp_path: Path, seed: int) -> None:
    """ReAgent's offline CartPole check: random-policy transitions (a random policy lasts ~22
    steps) are enough for double DQN to learn to balance far longer."""
    collect(tmp_path / "data", 100_000, 25_000)
    data, run = str(tmp_path / "data"), str(tmp_path / "run")
    result = distrl(
        "train", "--config", str(OFFLINE), "--seed", str(seed), "--data", data, "--run-dir", run,
        "--total-steps", "600000",
        "train.stop_return=null",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(distrl("eval", "--checkpoint", str(tmp_path / "run"), "--json").stdout)
    assert report["return_mean"] >= 3 * 22  # three times the random policy's return
