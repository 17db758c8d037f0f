"""Isaac Lab's documented multi-GPU command lines, with distrl's training module (``-m
distrl.train``) in place of Isaac Lab's ``train.py`` script and distrl's JAX launcher in place of
skrl's: one node, two nodes (each started with its own ``--node_rank``; here both on 127.0.0.1),
and JAX processes. Isaac Lab's flags are taken as its docs write them: ``--task``, ``--headless``,
``--distributed``, ``--num_envs`` (per process), ``--ml_framework``. Each line only gains a run dir,
a short budget and a free port."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from distrl.io import checkpoint as ckpt
from tests.distributed import free_port
from tests.helpers import REPO, clean_env, run_python

ISAAC_FLAGS = ("--task=CartPole-v1", "--headless", "--distributed")
SHORT = ("--total-steps", "2048", "log.tensorboard=false", "train.stop_return=null")


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _trained(run_dir: Path, ranks: int) -> dict:
    """The run's saved config, after checking every update ran on ``ranks`` ranks to the budget."""
    rows = _rows(run_dir)
    assert [row["ranks"] for row in rows] == [ranks] * len(rows) and rows[-1]["global_step"] >= 2048
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert cfg["env"]["id"] == "CartPole-v1"
    return cfg


@pytest.mark.slow
def test_one_node_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = run_python(
        "-m", "torch.distributed.run", "--nnodes=1", "--nproc_per_node=2", f"--master_port={free_port()}",
        "-m", "distrl.train", *ISAAC_FLAGS, "--num_envs", "4", "--run-dir", str(run), *SHORT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    cfg = _trained(run, ranks=2)
    # Isaac Lab's --num_envs counts each process's envs: 2 ranks x 4.
    assert cfg["env"]["num_envs_per_rank"] == 4 and cfg["env"]["num_envs"] is None


@pytest.mark.slow
def test_multi_node_line(tmp_path: Path) -> None:
    run, port = tmp_path / "run", free_port()
    nodes = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "torch.distributed.run",
                "--nproc_per_node=1",
                "--nnodes=2",
                f"--node_rank={node}",
                "--master_addr=127.0.0.1",
                f"--master_port={port}",
                "-m",
                "distrl.train",
                *ISAAC_FLAGS,
                "--run-dir",
                str(run),
                *SHORT,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(),
        )  # fmt: skip
        for node in (0, 1)
    ]
    for node in nodes:
        _, stderr = node.communicate(timeout=600)
        assert node.returncode == 0, stderr[-3000:]
    _trained(run, ranks=2)


@pytest.mark.slow
def test_jax_launcher_line(tmp_path: Path) -> None:
    run = tmp_path / "run"
    result = run_python(
        "-m", "distrl.launch.jax", "--nnodes=1", "--nproc_per_node=2",
        f"--coordinator_address=127.0.0.1:{free_port()}", "-m", "distrl.train", *ISAAC_FLAGS,
        "--ml_framework", "jax", "--run-dir", str(run), *SHORT, cwd=REPO,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert _trained(run, ranks=2)["ml_framework"] == "jax"
    # Every checkpoint compared the ranks' parameter digests before writing (the loop raises if
    # they differ); both ranks' own state (their JAX keys) is in it.
    saved = json.loads((ckpt.resolve_checkpoint(run) / "state.json").read_text())
    assert saved["world_size"] == 2 and len({json.dumps(r["runner"]) for r in saved["ranks"]}) == 2


def test_headless_is_accepted_and_num_envs_flags_exclude_each_other() -> None:
    result = run_python("-m", "distrl", "train", "--task=CartPole-v1", "--headless", "--num-envs", "8",
                        "--num_envs", "4")  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "distrl: error: --num-envs (over all ranks) and --num_envs (per rank, Isaac Lab's) exclude each other"
    )
