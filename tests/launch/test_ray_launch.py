"""``distrl train --launcher ray`` on a real Ray instance (one head for the whole module, token
authentication on): learners as Ray actors train exactly as torchrun's ranks do, solve CartPole,
and a cluster or placement group that cannot hold them is one line, in seconds."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from distrl.config import ClusterConfig, WorkersConfig
from distrl.errors import UserError
from distrl.io import checkpoint as ckpt
from tests.helpers import CARTPOLE, distrl, free_port, torchrun_train

pytest.importorskip("ray", reason="the ray extra is installed by make test")
from distrl.launch.ray_launch import check_fits  # noqa: E402

HEAD_CPUS = 4


@pytest.fixture(scope="module")
def ray_head() -> Iterator[str]:
    """A Ray head on 127.0.0.1 with token authentication; its address. The tests' distrl
    processes join it with the same token (the environment carries both variables)."""
    temp = Path(tempfile.mkdtemp(prefix="distrl-ray-test-"))  # short: Ray's Unix sockets live there
    token = temp / "auth_token"
    token.write_text(secrets.token_hex(32))
    saved = {
        k: os.environ.get(k) for k in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH", "RAY_USAGE_STATS_ENABLED")
    }
    os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token), RAY_USAGE_STATS_ENABLED="0")
    port = free_port()
    ray_bin = str(Path(sys.executable).with_name("ray"))
    head = subprocess.Popen(
        [ray_bin, "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
         f"--num-cpus={HEAD_CPUS}", "--num-gpus=0", "--include-dashboard=false", f"--temp-dir={temp}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    address = f"127.0.0.1:{port}"
    try:
        _wait_for_head(address)
        yield address
    finally:
        head.terminate()
        head.wait(timeout=60)
        for key, value in saved.items():
            os.environ.pop(key, None) if value is None else os.environ.__setitem__(key, value)
        shutil.rmtree(temp, ignore_errors=True)


def _wait_for_head(address: str) -> None:
    probe = "import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); ray.shutdown()"
    deadline = time.monotonic() + 60
    while True:
        result = subprocess.run(
            [sys.executable, "-c", probe, address], capture_output=True, text=True, check=False
        )
        if result.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Ray head did not come up: {result.stderr[-2000:]}")
        time.sleep(1)


def _ray_train(address: str, run_dir: Path, *overrides: str) -> subprocess.CompletedProcess:
    return distrl(
        "train", "--config", str(CARTPOLE), "--launcher", "ray", "--ray-address", address,
        "--run-dir", str(run_dir), "log.progress=false", "log.tensorboard=false", *overrides,
    )  # fmt: skip


def _param_digests(run_dir: Path) -> list[str]:
    state = json.loads((ckpt.resolve_checkpoint(run_dir) / "state.json").read_text())
    return [rank["param_sha256"] for rank in state["ranks"]]


def test_two_learners_on_ray_train_exactly_as_two_torchrun_ranks(ray_head: str, tmp_path: Path) -> None:
    budget = ["train.total_steps=4096", "train.stop_return=null", "checkpoint.interval_steps=4096"]
    result = _ray_train(ray_head, tmp_path / "ray", "workers.policy=2", *budget)
    assert result.returncode == 0, result.stderr[-3000:]
    reference = torchrun_train(2, "--config", str(CARTPOLE), "--run-dir", str(tmp_path / "torchrun"), *budget)
    assert reference.returncode == 0, reference.stderr[-3000:]
    on_ray = _param_digests(tmp_path / "ray")
    assert len(on_ray) == 2 and on_ray[0] == on_ray[1]  # the learners stay bit-identical
    assert on_ray == _param_digests(tmp_path / "torchrun")  # and take torchrun's very steps


@pytest.mark.slow
def test_one_learner_on_ray_solves_cartpole(ray_head: str, tmp_path: Path) -> None:
    result = _ray_train(ray_head, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(distrl("eval", "--checkpoint", str(tmp_path), "--json").stdout)
    assert report["return_mean"] >= 475


def test_a_group_that_cannot_be_placed_fails_in_seconds(ray_head: str, tmp_path: Path) -> None:
    started = time.monotonic()
    # Two bundles on distinct nodes of a one-node cluster: the CPUs exist, the placement cannot.
    result = _ray_train(
        ray_head,
        tmp_path,
        "workers.policy=2",
        "cluster.strategy=STRICT_SPREAD",
        "cluster.placement_timeout_s=3",
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "was not placed within cluster.placement_timeout_s=3" in result.stderr
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 60


def test_a_job_larger_than_the_cluster_is_one_line(ray_head: str, tmp_path: Path) -> None:
    result = _ray_train(ray_head, tmp_path, "workers.policy=3", "workers.cpus_per_policy=2")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"distrl: error: workers.policy=3 need 6 CPU in all; the Ray cluster has {HEAD_CPUS}"
    )


@pytest.mark.parametrize(
    ("cluster", "workers", "message"),
    [
        (
            ClusterConfig(num_nodes=2),
            WorkersConfig(),
            "cluster.num_nodes=2: the Ray cluster has 1 alive node",
        ),
        (
            ClusterConfig(cpus_per_node=1),
            WorkersConfig(policy=2),
            "more than cluster.cpus_per_node x num_nodes = 1",
        ),
        (
            ClusterConfig(),
            WorkersConfig(gpus_per_policy=1),
            "more than cluster.gpus_per_node x num_nodes = 0",
        ),
        (ClusterConfig(gpus_per_node=1), WorkersConfig(gpus_per_policy=1), "the Ray cluster has 0"),
    ],
    ids=["nodes", "cpu-budget", "gpu-budget", "gpus"],
)
def test_fit_check_names_what_does_not_fit(
    cluster: ClusterConfig, workers: WorkersConfig, message: str
) -> None:
    with pytest.raises(UserError, match=message):
        check_fits(cluster, workers, {"CPU": 4.0}, nodes=1)
