"""ReAgent-style launch: the same command on each "node", meeting through one shared file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from distrl.io import checkpoint as ckpt
from distrl.launch.file_rendezvous import worker_argv
from tests.helpers import CARTPOLE, clean_env


def test_worker_argv_drops_only_launcher_flags() -> None:
    argv = ["--config", "c.yaml", "--num-nodes", "2", "--node-index=1", "--rendezvous-file", "/f",
            "--use-all-available-devices", "--procs-per-node", "3", "algo.gamma=0.9"]  # fmt: skip
    assert worker_argv(argv) == ["--config", "c.yaml", "algo.gamma=0.9"]


@pytest.mark.slow
def test_two_nodes_meet_through_a_file_and_only_node_0_saves(tmp_path: Path) -> None:
    rendezvous = tmp_path / "shared" / "rendezvous"
    rendezvous.parent.mkdir()
    nodes = []
    for index in range(2):
        cmd = [
            sys.executable, "-m", "distrl", "train", "--config", str(CARTPOLE),
            "--run-dir", str(tmp_path / f"node{index}" / "run"), "--total-steps", "8192",
            "train.stop_return=null", "--num-nodes", "2", "--node-index", str(index),
            "--rendezvous-file", str(rendezvous), "--procs-per-node", "1",
        ]  # fmt: skip
        nodes.append(subprocess.Popen(cmd, env=clean_env(), stderr=subprocess.PIPE, text=True))
    for node in nodes:
        _, stderr = node.communicate(timeout=300)
        assert node.returncode == 0, stderr[-3000:]
    state = json.loads((ckpt.resolve_checkpoint(tmp_path / "node0" / "run") / "state.json").read_text())
    assert state["world_size"] == 2 and state["global_step"] == 8192
    assert state["ranks"][0]["param_sha256"] == state["ranks"][1]["param_sha256"]
    assert not (tmp_path / "node1" / "run").exists()  # rank 1 never writes


def test_bad_node_index_is_a_clear_error(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "distrl", "train", "--num-nodes", "2", "--node-index", "2",
           "--rendezvous-file", str(tmp_path / "f")]  # fmt: skip
    result = subprocess.run(cmd, env=clean_env(), capture_output=True, text=True, check=False)
    assert result.returncode == 2
    assert result.stderr.strip() == "distrl: error: --node-index 2: must be in 0..1 for --num-nodes 2"
