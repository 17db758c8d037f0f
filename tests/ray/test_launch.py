"""``distrl train --launcher ray`` on a real Ray instance (the session's head, token
authentication on): learners as Ray actors train exactly as ranks started with torchrun's
variables do, solve CartPole, and a cluster or placement group that cannot hold them is one line,
in seconds."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest
import torch

from distrl.config.run import load_config
from distrl.config.sections import ClusterConfig, WorkersConfig
from distrl.errors import UserError
from distrl.io import checkpoint as ckpt
from distrl.io import shards
from distrl.launch.preemption import PREEMPTED_EXIT_CODE
from tests.helpers import CARTPOLE, REPO, clean_env, distrl, run_python, train_ranks
from tests.ray_cluster import (
    BUDGET,
    HEAD_CPUS,
    env_steps_by_worker,
    final_row,
    metrics_rows,
    param_digests,
    ray_train,
    ray_train_killing,
)
from tests.stopping import running

pytest.importorskip("ray", reason="the ray extra is installed by make test")
from distrl.ray.driver import check_fits  # noqa: E402
from distrl.ray.groups import WORKER_GROUPS, run_groups  # noqa: E402


@pytest.mark.slow
def test_two_learners_on_ray_train_exactly_as_two_ranks(ray_head: str, tmp_path: Path) -> None:
    """...as two ranks started with torchrun's variables (``train_ranks``; torchrun itself is
    tested in tests/runners/test_torchrun.py)."""
    result = ray_train(ray_head, tmp_path / "ray", "workers.policy=2", *BUDGET)
    assert result.returncode == 0, result.stderr[-3000:]
    # The driver prints rank 0's last line: what was trained and why it stopped.
    last = result.stdout.strip().splitlines()[-1]
    assert last.startswith("distrl: trained 4096 env steps on 2 rank(s)"), result.stdout[-2000:]
    assert "stopped: the step budget (train.total_steps=4096) was reached" in last
    reference = train_ranks(2, "--config", str(CARTPOLE), "--run-dir", str(tmp_path / "ranks"), *BUDGET)
    assert reference.returncode == 0, reference.stderr[-3000:]
    on_ray = param_digests(tmp_path / "ray")
    assert len(on_ray) == 2 and on_ray[0] == on_ray[1]  # the learners stay bit-identical
    assert on_ray == param_digests(tmp_path / "ranks")  # and take the ranks' very steps


@pytest.mark.slow
def test_two_sharded_learners_on_ray_train_as_two_sharded_ranks(ray_head: str, tmp_path: Path) -> None:
    """``train.sharding=fsdp`` over Ray's learners: the same weights as two sharded ranks started
    with torchrun's variables, each learner writing its own shards."""
    short = ["train.total_steps=1024", "train.stop_return=null", "checkpoint.interval_steps=1024"]
    result = ray_train(ray_head, tmp_path / "ray", "workers.policy=2", "train.sharding=fsdp", *short)
    assert result.returncode == 0, result.stderr[-3000:]
    reference = train_ranks(
        2, "--config", str(CARTPOLE), "--run-dir", str(tmp_path / "ranks"), "train.sharding=fsdp", *short
    )
    assert reference.returncode == 0, reference.stderr[-3000:]
    on_ray, on_ranks = (
        shards.read_whole(ckpt.resolve_checkpoint(tmp_path / run) / shards.MODEL_DIR)
        for run in ("ray", "ranks")
    )
    assert on_ray.keys() == on_ranks.keys()
    assert all(torch.equal(on_ray[name], on_ranks[name]) for name in on_ray)


@pytest.mark.slow
@pytest.mark.learning(seeds=5)  # make test: Ray mode's exactness, workers and faults (this file)
def test_one_learner_with_env_workers_on_ray_solves_cartpole(
    ray_head: str, tmp_path: Path, seed: int
) -> None:
    config = REPO / "configs" / "ray_small_cpu.yaml"  # 1 learner, 2 env workers, 1 eval worker
    result = ray_train(ray_head, tmp_path, "--seed", str(seed), config=config)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(distrl("eval", "--checkpoint", str(tmp_path), "--json").stdout)
    assert report["return_mean"] >= 475
    rows = metrics_rows(tmp_path)
    assert rows[-1]["env_worker_failures"] == 0
    assert any("eval/return_mean" in row for row in rows)  # the eval worker evaluated meanwhile


@pytest.mark.slow
def test_a_killed_learner_is_replaced_and_the_group_resumes_from_its_newest_checkpoint(
    ray_head: str, tmp_path: Path
) -> None:
    """...with the driver's config: the YAML file is deleted once training runs, and the rebuilt
    learners train with the config it held (the driver hands them its own, as data)."""
    config = tmp_path.parent / f"{tmp_path.name}-config.yaml"
    config.write_text(CARTPOLE.read_text().replace("learning_rate: 1.0e-3", "learning_rate: 7.0e-4"))
    metrics = tmp_path / "metrics.jsonl"

    def delete_config_once_training() -> None:
        while not metrics.exists():
            time.sleep(0.05)
        config.unlink()

    deleter = threading.Thread(target=delete_config_once_training, daemon=True)
    deleter.start()
    overrides = ["workers.policy=2", *BUDGET, "train.total_steps=32768", "checkpoint.interval_steps=1024"]
    result, killed = ray_train_killing(ray_head, tmp_path, "policy", 12, *overrides, config=config)
    deleter.join(timeout=5)
    assert not config.exists()
    assert result.returncode == 0, result.stderr[-3000:]
    assert killed, "the run ended before the learner could be killed"
    assert (
        "the learners' group is rebuilt and resumes from the newest checkpoint (restart 1 of at most 3)"
        in (result.stderr)
    )
    assert "died: killed by ray.kill" in result.stderr  # the cause
    assert "Traceback" not in result.stderr
    state = json.loads((ckpt.resolve_checkpoint(tmp_path) / "state.json").read_text())
    assert state["global_step"] == 32768 and state["launch_index"] == 1  # finished by the second launch
    assert state["config"]["algo"]["learning_rate"] == 7.0e-4  # the deleted file's, not a default
    assert len({rank["param_sha256"] for rank in state["ranks"]}) == 1
    # The second launch resumed from the newest checkpoint written before the kill: every update
    # of 512 steps is one row and every second one a checkpoint, so at most one interval (the
    # one the background writer may not have finished) lies between the kill and the resume.
    rows_at_kill = int(killed.split()[1])
    rows = metrics_rows(tmp_path)
    resumed_at = next(row["global_step"] for row in rows if row["launcher_restarts"] == 1) - 512
    assert resumed_at >= 512 * rows_at_kill - 2 * 1024, (resumed_at, rows_at_kill)
    first_launch = resumed_at // 512
    assert [row["launcher_restarts"] for row in rows] == [0] * first_launch + [1] * (64 - first_launch)


_UNAUTHENTICATED = """
import sys
import ray

ray.init(address=sys.argv[1], log_to_driver=False)
print("connected", flush=True)
"""


@pytest.mark.slow
def test_without_an_address_a_local_ray_with_token_auth_runs_the_job(tmp_path: Path) -> None:
    """...until the driver is preempted (SIGTERM, as a scheduler stops a job) once the job has
    been looked at: the driver passes it on to its learner, which stops as a preempted rank
    does (a checkpoint at its last update, exit 75), and the local Ray goes with the driver."""
    env = {k: v for k, v in clean_env().items() if not k.startswith("RAY_")}  # nothing set for Ray
    env["HOME"] = str(tmp_path / "home")
    config, run_dir = REPO / "configs" / "ray_small_cpu.yaml", tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)  # an older run, which --overwrite replaces
    (run_dir / "checkpoints" / "older").write_text("")
    job = subprocess.Popen(
        [sys.executable, "-m", "distrl", "train", "--config", str(config), "--launcher", "ray",
         "--run-dir", str(run_dir), "--overwrite", "log.progress=false", "train.stop_return=null",
         "train.total_steps=102400", "cluster.placement_timeout_s=180"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip  # the actors' start (each imports torch) takes over 30 s beside a busy suite
    try:
        deadline = time.monotonic() + 240
        while not (run_dir / "metrics.jsonl").exists() and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        # While it runs: a driver without the token is turned away ...
        if job.poll() is not None:
            pytest.fail(f"the job ended before it could be looked at:\n{job.communicate()[1][-3000:]}")
        address = json.loads((run_dir / "ray.json").read_text())["address"]
        refused_stderr = tmp_path / "refused.err"
        with refused_stderr.open("w") as stderr_file:
            refused = subprocess.Popen(
                [sys.executable, "-c", _UNAUTHENTICATED, address], env=env, stdout=subprocess.PIPE,
                stderr=stderr_file, text=True,
            )  # fmt: skip
        # ... and, meanwhile, `distrl status --run-dir` finds the job's own Ray and its workers.
        status = distrl("status", "--run-dir", str(run_dir), "--json", env=env)
        assert status.returncode == 0, status.stderr[-3000:]
        workers = json.loads(status.stdout)["workers"]
        alive = {w["group"] for w in workers if w["state"] == "ALIVE"}
        assert alive == {"policy", "env", "eval"}
        # Ray's driver retries a refused connection for minutes: its first refusal is enough.
        refused_by = time.monotonic() + 60
        while "InvalidAuthToken" not in refused_stderr.read_text() and time.monotonic() < refused_by:
            time.sleep(0.1)
        refused.kill()
        out, err = refused.communicate()[0], refused_stderr.read_text()
        assert "connected" not in out and "InvalidAuthToken" in err, (out, err[-3000:])
        # Looked at: the rest of the budget is not waited for.
        (learner,) = (psutil.Process(w["pid"]) for w in workers if w["group"] == "policy")
        ray_processes = [p for p in psutil.Process(job.pid).children(recursive=True) if running(p)]
        job.send_signal(signal.SIGTERM)
    finally:
        _, stderr = job.communicate(timeout=600)
    assert job.returncode == PREEMPTED_EXIT_CODE, stderr[-3000:]
    assert "distrl: SIGTERM: the learners stop after their update, with a checkpoint" in stderr
    # The learner stopped cleanly, its last update logged and checkpointed, and its Ray with it.
    state = json.loads((ckpt.resolve_checkpoint(run_dir) / "state.json").read_text())
    assert 0 < state["global_step"] == final_row(run_dir)["global_step"] < 102400
    _, left = psutil.wait_procs([learner, *ray_processes], timeout=60)
    assert ray_processes and not [p for p in left if running(p)], left
    # Ray's sessions, logs and token in the run dir (reached through a short link: this path is
    # too long for Ray's sockets), the token owner-only, nothing in the user's home.
    assert list((run_dir / "ray").glob("session_*/logs/raylet.out"))
    assert (run_dir / "ray" / "auth_token").stat().st_mode & 0o777 == 0o600
    assert not (tmp_path / "home").exists()
    assert not (run_dir / "ray.json").exists()  # gone with the Ray instance
    assert not (run_dir / "checkpoints" / "older").exists()
    assert "distrl status --run-dir" in stderr


_HOLD_CPUS = """
import sys
import ray
from ray.util.placement_group import placement_group

ray.init(address=sys.argv[1], log_to_driver=False)
held = placement_group([{"CPU": float(sys.argv[2])}])
ray.get(held.ready(), timeout=60)
print("held", flush=True)
sys.stdin.read()  # until the test closes it; the group goes with this driver
"""


@pytest.mark.slow
def test_a_node_that_cannot_be_placed_fails_in_seconds(ray_head: str, tmp_path: Path) -> None:
    # Another job holds all but half a CPU: the cluster has the CPUs, they are not free.
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD_CPUS, ray_head, str(HEAD_CPUS - 0.5)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "held", holder.communicate(timeout=60)[1][-3000:]
        started = time.monotonic()
        result = ray_train(ray_head, tmp_path, "cluster.placement_timeout_s=3")
    finally:
        holder.communicate(input="", timeout=60)
    assert result.returncode == 2, result.stderr[-3000:]
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith(
        "distrl: error: node 0 of cluster.num_nodes=1 (its 1 worker(s) need 1 CPU, 0 GPU on one Ray "
        "node) was not placed within cluster.placement_timeout_s=3: free now in the Ray cluster: 0.5 CPU"
    ), line
    assert line.endswith(
        "; missing: 0.5 CPU (see `ray status`): wait for other jobs to free them (a longer "
        "cluster.placement_timeout_s) or ask for less: fewer workers.policy, or a smaller "
        "workers.cpus_per_policy"
    ), line
    assert "Traceback" not in result.stderr
    assert time.monotonic() - started < 60


@pytest.mark.slow
def test_a_job_larger_than_the_cluster_is_one_line(ray_head: str, tmp_path: Path) -> None:
    result = ray_train(ray_head, tmp_path, "workers.policy=3", "workers.cpus_per_policy=2")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1] == (
        f"distrl: error: workers.policy=3 need 6 CPU in all; the Ray cluster has {HEAD_CPUS}: set "
        "workers.policy=2 or workers.cpus_per_policy=1.33, or join a larger Ray cluster with --ray-address"
    )


@pytest.mark.parametrize(
    ("cluster", "workers", "message"),
    [
        (
            ClusterConfig(num_nodes=2),
            WorkersConfig(policy=2),  # a learner on each node
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
        (
            ClusterConfig(num_nodes=2, strategy="PACK", cpus_per_node=1.5),
            WorkersConfig(env=2, cpus_per_env=0.75),  # node 0: the learner and an env worker
            "node 0 of the job needs 1.75 CPU on one Ray node .*: more than cluster.cpus_per_node = 1.5",
        ),
    ],
    ids=["nodes", "cpu-budget", "gpu-budget", "gpus", "one-node"],
)
def test_fit_check_names_what_does_not_fit(
    cluster: ClusterConfig, workers: WorkersConfig, message: str
) -> None:
    with pytest.raises(UserError, match=message):
        check_fits(cluster, workers, WORKER_GROUPS, [{"CPU": 4.0}])


def test_packed_nodes_may_outnumber_the_ray_nodes() -> None:
    # Node 0 holds 2 of the 3 learners (2 CPU), node 1 the third, both on the one Ray node.
    check_fits(
        ClusterConfig(num_nodes=2, strategy="PACK", cpus_per_node=2),
        WorkersConfig(policy=3),
        WORKER_GROUPS,
        [{"CPU": 4.0}],
    )


def test_a_node_larger_than_any_ray_node_is_one_line() -> None:
    # 3 CPUs in all fit the cluster's 4, but not on one of its 2-CPU nodes.
    with pytest.raises(
        UserError, match="node 0 of the job needs 3 CPU on one Ray node .*: the largest Ray node has 2"
    ):
        check_fits(
            ClusterConfig(), WorkersConfig(cpus_per_policy=3), WORKER_GROUPS, [{"CPU": 2.0}, {"CPU": 2.0}]
        )


@pytest.mark.parametrize(
    ("cluster", "workers", "nodes", "way_out"),
    [
        (  # the 2-core laptop: fewer env workers, or half a CPU each
            ClusterConfig(),
            WorkersConfig(env=2),
            [{"CPU": 2.0}],
            ": set workers.env=1 or workers.cpus_per_env=0.5, or join a larger Ray cluster with "
            "--ray-address",
        ),
        (  # env workers below one per learner are none
            ClusterConfig(),
            WorkersConfig(policy=2, env=4, eval=1),
            [{"CPU": 4.0}],
            ": set workers.env=0 or workers.cpus_per_env=0.25, or join a larger Ray cluster with "
            "--ray-address",
        ),
        (
            ClusterConfig(gpus_per_node=4),
            WorkersConfig(policy=4, gpus_per_policy=1),
            [{"CPU": 8.0, "GPU": 2.0}],
            ": set workers.policy=2 or workers.gpus_per_policy=0 (learners on the CPU), or join a larger "
            "Ray cluster with --ray-address",
        ),
        (
            ClusterConfig(num_nodes=2, strategy="PACK", cpus_per_node=1.5),
            WorkersConfig(env=2, cpus_per_env=0.75),
            [{"CPU": 4.0}],
            ": set workers.cpus_per_policy=0.75 or workers.cpus_per_env=0.5, or raise "
            "cluster.cpus_per_node to 1.75",
        ),
        (
            ClusterConfig(),
            WorkersConfig(gpus_per_policy=1),
            [{"CPU": 4.0}],
            ": set workers.gpus_per_policy=0 (learners on the CPU), or raise cluster.gpus_per_node to 1",
        ),
    ],
    ids=["laptop", "env-none", "gpus", "one-node", "gpu-budget"],
)
def test_fit_check_names_settings_that_fit(
    cluster: ClusterConfig, workers: WorkersConfig, nodes: list[dict[str, float]], way_out: str
) -> None:
    with pytest.raises(UserError) as refused:
        check_fits(cluster, workers, WORKER_GROUPS, nodes)
    assert str(refused.value).endswith(way_out), str(refused.value)
    for setting in way_out.split(", or ")[0].removeprefix(": set ").split(" or "):
        key, value = setting.split(" (")[0].split("=")
        section, field = key.split(".")
        fixed = {"cluster": cluster, "workers": workers}
        fixed[section] = fixed[section].model_copy(
            update={field: type(getattr(fixed[section], field))(value)}
        )
        check_fits(fixed["cluster"], fixed["workers"], WORKER_GROUPS, nodes)  # each suggested setting fits


@pytest.mark.parametrize("family", ["ray", "grpo"])
@pytest.mark.parametrize("shape", ["small", "medium", "large"])
def test_shipped_gpu_configs_fit_their_cluster_shape_and_need_all_of_it(family: str, shape: str) -> None:
    cfg = load_config(REPO / "configs" / f"{family}_{shape}.yaml")
    nodes, per_node = (
        cfg.cluster.num_nodes,
        {"CPU": cfg.cluster.cpus_per_node, "GPU": cfg.cluster.gpus_per_node},
    )
    check_fits(cfg.cluster, cfg.workers, run_groups(cfg), [per_node] * nodes)
    assert cfg.workers.policy == nodes * cfg.cluster.gpus_per_node  # one learner per GPU
    # The job needs every GPU of the shape.
    short = [*[per_node] * (nodes - 1), {"CPU": per_node["CPU"], "GPU": per_node["GPU"] - 1}]
    with pytest.raises(UserError, match="GPU in all; the Ray cluster has"):
        check_fits(cfg.cluster, cfg.workers, run_groups(cfg), short)


@pytest.mark.slow
def test_shipped_cpu_config_runs_learners_with_env_workers(ray_head: str, tmp_path: Path) -> None:
    config = REPO / "configs" / "ray_medium_cpu.yaml"
    result = ray_train(ray_head, tmp_path, *BUDGET, config=config)
    assert result.returncode == 0, result.stderr[-3000:]
    digests = param_digests(tmp_path)
    assert len(digests) == 2 and digests[0] == digests[1]
    final = final_row(tmp_path)
    assert final["env_worker_failures"] == 0
    # 2 nodes of 1 learner and 2 env workers: each env worker stepped its 8 of the 32 envs for
    # every update, no more.
    assert env_steps_by_worker(tmp_path) == [final["global_step"] // 4] * 4


def test_status_of_a_run_dir_whose_driver_was_killed_is_one_line(tmp_path: Path) -> None:
    from distrl.ray.cluster import RAY_JSON, local_job_cluster

    # What a driver killed by SIGKILL leaves behind: its ray.json, nothing listening there.
    left = {"address": "127.0.0.1:9", "token_path": str(tmp_path / "token"), "namespace": "distrl"}
    (tmp_path / RAY_JSON).write_text(json.dumps(left))
    with pytest.raises(UserError, match=r"the job's local Ray instance at 127.0.0.1:9 has ended"):
        local_job_cluster(tmp_path)
    (tmp_path / RAY_JSON).write_text("{}")
    with pytest.raises(UserError, match="no job there runs its own local Ray instance"):
        local_job_cluster(tmp_path)


_BROKEN_ACTOR = """
import sys
from pathlib import Path

import ray

from distrl.errors import UserError
from distrl.ray.learners import ready

ray.init(address=sys.argv[1], log_to_driver=False)


@ray.remote(num_cpus=0)
class Broken:
    def __init__(self):
        raise ValueError("the env's assets are missing")


try:
    ready(ray, Broken.remote().__ray_ready__.remote(), 60, Path(sys.argv[2]))
except UserError as exc:
    print(exc)
"""


@pytest.mark.slow
def test_an_actor_that_cannot_start_is_one_line_and_its_traceback_is_in_the_run_dir(
    ray_head: str, tmp_path: Path
) -> None:
    result = run_python("-c", _BROKEN_ACTOR, ray_head, str(tmp_path), timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    line = result.stdout.strip()
    assert len(line.splitlines()) == 1, line
    assert line.startswith("an actor of the job could not start: "), line
    assert "ValueError" in line and f"(traceback in {tmp_path / 'errors.log'})" in line, line
    log = (tmp_path / "errors.log").read_text()
    # The remote frames down to the raise, and what was raised.
    assert "line 16, in __init__" in log and "ValueError: the env's assets are missing" in log, log


@pytest.mark.slow
def test_a_dry_run_joins_the_learners_on_the_cluster_named_by_ray_address_and_trains_nothing(
    ray_head: str, tmp_path: Path
) -> None:
    """No --ray-address: ``RAY_ADDRESS`` in the environment names the cluster to join."""
    env = {**clean_env(), "RAY_ADDRESS": ray_head}
    result = distrl(
        "train", "--config", str(CARTPOLE), "--launcher", "ray", "--run-dir", str(tmp_path),
        "log.progress=false", "log.tensorboard=false", "workers.policy=2", "--dry-run", env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert not (tmp_path / "ray").exists()  # no local Ray of its own: it ran on the session's head
    assert not (tmp_path / "metrics.jsonl").exists() and not (tmp_path / "checkpoints").exists()


@pytest.mark.slow
def test_jax_learners_under_ray_are_refused_before_ray_starts(ray_head: str, tmp_path: Path) -> None:
    result = ray_train(ray_head, tmp_path, "ml_framework=jax")
    assert result.returncode == 2
    assert result.stderr.strip().startswith("distrl: error: ml_framework: jax across processes needs")
