"""``distrl train --launcher ray`` on a real Ray instance (the session's head, token
authentication on): learners as Ray actors train exactly as torchrun's ranks do, solve CartPole,
and a cluster or placement group that cannot hold them is one line, in seconds."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from distrl.config import ClusterConfig, WorkersConfig, load_config
from distrl.errors import UserError
from tests.helpers import CARTPOLE, REPO, distrl, torchrun_train
from tests.ray_cluster import BUDGET, HEAD_CPUS, final_row, param_digests, ray_train

pytest.importorskip("ray", reason="the ray extra is installed by make test")
from distrl.launch.ray_launch import check_fits  # noqa: E402


def test_two_learners_on_ray_train_exactly_as_two_torchrun_ranks(ray_head: str, tmp_path: Path) -> None:
    result = ray_train(ray_head, tmp_path / "ray", "workers.policy=2", *BUDGET)
    assert result.returncode == 0, result.stderr[-3000:]
    reference = torchrun_train(2, "--config", str(CARTPOLE), "--run-dir", str(tmp_path / "torchrun"), *BUDGET)
    assert reference.returncode == 0, reference.stderr[-3000:]
    on_ray = param_digests(tmp_path / "ray")
    assert len(on_ray) == 2 and on_ray[0] == on_ray[1]  # the learners stay bit-identical
    assert on_ray == param_digests(tmp_path / "torchrun")  # and take torchrun's very steps


@pytest.mark.slow
def test_one_learner_on_ray_solves_cartpole(ray_head: str, tmp_path: Path) -> None:
    result = ray_train(ray_head, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(distrl("eval", "--checkpoint", str(tmp_path), "--json").stdout)
    assert report["return_mean"] >= 475


def test_a_group_that_cannot_be_placed_fails_in_seconds(ray_head: str, tmp_path: Path) -> None:
    started = time.monotonic()
    # Two bundles on distinct nodes of a one-node cluster: the CPUs exist, the placement cannot.
    result = ray_train(
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
    result = ray_train(ray_head, tmp_path, "workers.policy=3", "workers.cpus_per_policy=2")
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


@pytest.mark.parametrize("shape", ["small", "medium", "large"])
def test_shipped_gpu_configs_fit_their_cluster_shape_and_need_all_of_it(shape: str) -> None:
    cfg = load_config(REPO / "configs" / f"ray_{shape}.yaml")
    nodes, per_node = (
        cfg.cluster.num_nodes,
        {"CPU": cfg.cluster.cpus_per_node, "GPU": cfg.cluster.gpus_per_node},
    )
    check_fits(cfg.cluster, cfg.workers, {k: v * nodes for k, v in per_node.items()}, nodes)
    assert cfg.workers.policy == nodes * cfg.cluster.gpus_per_node  # one learner per GPU
    # The job needs every GPU of the shape.
    short = {"CPU": per_node["CPU"] * nodes, "GPU": per_node["GPU"] * nodes - 1}
    with pytest.raises(UserError, match="GPU in all; the Ray cluster has"):
        check_fits(cfg.cluster, cfg.workers, short, nodes)


def test_shipped_cpu_config_runs_learners_with_env_workers(ray_head: str, tmp_path: Path) -> None:
    config = REPO / "configs" / "ray_medium_cpu.yaml"
    result = ray_train(ray_head, tmp_path, *BUDGET, config=config)
    assert result.returncode == 0, result.stderr[-3000:]
    digests = param_digests(tmp_path)
    assert len(digests) == 2 and digests[0] == digests[1]
    assert final_row(tmp_path)["env_worker_failures"] == 0  # the env workers collected
