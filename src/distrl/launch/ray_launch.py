"""``distrl train --launcher ray``: the policy (learner) workers as Ray actors on a placement group.

The driver starts a local Ray instance (dashboard and usage stats off, token authentication on
with the token in Ray's temp dir, not the user's home) or joins one (``--ray-address``), checks
that the config's cluster and workers fit what Ray has, places one bundle per learner (a group
that cannot be placed within ``cluster.placement_timeout_s`` is one line naming what is missing,
never a hang), and starts the learners. They form one torch.distributed group among themselves,
with the master address and a free port from the first bundle's node (as NeMo RL does), and each
runs the ordinary training process in its actor: same loop, configs, checkpoints and metrics as
torchrun's ranks, which is what they look like to it. The driver owns the actors (they share its
fate) and exits with the first failing learner's code.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import secrets
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any, TextIO

from distrl.config import ClusterConfig, RunConfig, WorkersConfig
from distrl.errors import UserError
from distrl.launch.ray_env_workers import failure_cause

RAY_EXTRA = "--launcher ray needs Ray: pip install 'distrl[ray]'"
RAY_FLAGS = {"--launcher": True, "--ray-address": True, "--namespace": True}
"""The Ray launcher's own flags (all take a value); they are not passed to the learners."""


def launch(argv: list[str], cfg: RunConfig, address: str | None, namespace: str) -> int:
    """Run the learners of ``distrl train`` ``argv`` on Ray; returns the job's exit status."""
    from distrl.launch.file_rendezvous import worker_argv

    check_workers(cfg)
    ray = _import_ray()
    _start_or_join(ray, address, namespace, cfg.cluster)
    try:
        check_fits(cfg.cluster, cfg.workers, ray.cluster_resources(), len(_alive_nodes(ray)))
        group = _place(ray, cfg.cluster, cfg.workers)
        learners = _start_learners(ray, group, cfg.workers)
        env_workers, _held = _start_env_workers(ray, group, cfg.workers, namespace)
        master_addr, master_port = ray.get(learners[0].free_address.remote())
        learner_argv = [*worker_argv(argv, RAY_FLAGS), "--distributed"]
        runs = [
            learner.train.remote(
                learner_argv,
                {
                    **_rank_env(rank, len(learners), master_addr, master_port),
                    **_env_workers_env(env_workers[rank], namespace, cfg.workers),
                },
            )
            for rank, learner in enumerate(learners)
        ]
        return _wait(ray, runs)
    finally:
        ray.shutdown()


def check_workers(cfg: RunConfig) -> None:
    """The worker groups the run's algorithm can use, before Ray starts."""
    workers = cfg.workers
    if workers.env:
        if cfg.algo.name != "ppo" or cfg.ml_framework != "torch" or cfg.data.path is not None:
            raise UserError(
                "workers.env: env workers collect for PPO with ml_framework: torch; set workers.env=0"
            )
        if cfg.train.straggler_threshold is not None:
            raise UserError(
                "train.straggler_threshold: env workers always collect whole rollouts; "
                "unset it or set workers.env=0"
            )
        if workers.env < workers.policy:
            raise UserError(
                f"workers.env={workers.env} is fewer than the {workers.policy} learners (workers.policy): "
                f"give each learner at least one, or set workers.env=0"
            )


def check_fits(
    cluster: ClusterConfig, workers: WorkersConfig, resources: dict[str, float], nodes: int
) -> None:
    """One line naming what does not fit, before anything starts."""
    if cluster.num_nodes > nodes:
        raise UserError(f"cluster.num_nodes={cluster.num_nodes}: the Ray cluster has {nodes} alive node(s)")
    wanted = {
        "CPU": workers.policy * workers.cpus_per_policy + workers.env * workers.cpus_per_env,
        "GPU": workers.policy * workers.gpus_per_policy,
    }
    budget = {"CPU": cluster.cpus_per_node, "GPU": float(cluster.gpus_per_node)}
    for resource, need in wanted.items():
        if budget[resource] is not None and need > budget[resource] * cluster.num_nodes:
            raise UserError(
                f"{_job(workers)} need {need:g} {resource} in all: more than "
                f"cluster.{resource.lower()}s_per_node x num_nodes = "
                f"{budget[resource] * cluster.num_nodes:g}"
            )
        if need > resources.get(resource, 0.0):
            raise UserError(
                f"{_job(workers)} need {need:g} {resource} in all; the Ray cluster has "
                f"{resources.get(resource, 0.0):g}"
            )


def _job(workers: WorkersConfig) -> str:
    job = f"workers.policy={workers.policy}"
    return f"{job} and workers.env={workers.env}" if workers.env else job


class _Learner:
    """One policy worker: a rank of the learners' group, training in its own actor process."""

    def free_address(self) -> tuple[str, int]:
        """This node's address and a port free on it, for the group's TCP store."""
        import ray

        host = ray.util.get_node_ip_address()
        with socket.socket() as probe:
            probe.bind((host, 0))
            return host, probe.getsockname()[1]

    def train(self, argv: list[str], env: dict[str, str]) -> tuple[int, str]:
        """The training process's exit status and its last ``distrl: error:`` line (Ray forwards
        actor output to the driver late or not at all once the job ends: the driver says it)."""
        from distrl.cli import main

        os.environ.update(env)
        stderr = _ErrorLines(sys.stderr)
        with contextlib.redirect_stderr(stderr):
            code = main(["train", *argv])
        return code, stderr.last_error


class _ErrorLines(io.TextIOBase):
    """Writes through to ``stream`` and keeps the last line that reports a distrl error."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.last_error = ""

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.startswith("distrl: error: "):
                self.last_error = line.removeprefix("distrl: error: ")
        return self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


def _start_or_join(ray: Any, address: str | None, namespace: str, cluster: ClusterConfig) -> None:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    if address is not None:
        ray.init(address=address, namespace=namespace, log_to_driver=True, runtime_env=_runtime_env())
        return
    temp_dir = Path(cluster.ray_temp_dir or tempfile.mkdtemp(prefix="distrl-ray-"))
    temp_dir.mkdir(parents=True, exist_ok=True)
    token = temp_dir / "auth_token"
    if not token.exists():
        token.touch(mode=0o600)
        token.write_text(secrets.token_hex(32))
    # Ray reads the mode only from the environment; its processes inherit both variables.
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(token)
    ray.init(
        namespace=namespace,
        include_dashboard=False,
        _temp_dir=str(temp_dir),
        log_to_driver=True,
        runtime_env=_runtime_env(),
    )


def _runtime_env() -> dict[str, Any]:
    """The job's workers import from where the driver runs (a user's own env classes) too."""
    paths = [os.getcwd(), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"env_vars": {"PYTHONPATH": os.pathsep.join(paths)}}


def _alive_nodes(ray: Any) -> list[dict[str, Any]]:
    return [node for node in ray.nodes() if node.get("Alive")]


def _place(ray: Any, cluster: ClusterConfig, workers: WorkersConfig) -> Any:
    from ray.exceptions import GetTimeoutError
    from ray.util.placement_group import placement_group, remove_placement_group

    bundle = {"CPU": workers.cpus_per_policy}
    if workers.gpus_per_policy:
        bundle["GPU"] = workers.gpus_per_policy
    # Learners' bundles first, then the env workers'.
    bundles = [bundle] * workers.policy + [{"CPU": workers.cpus_per_env}] * workers.env
    group = placement_group(bundles, strategy=cluster.strategy)
    try:
        ray.get(group.ready(), timeout=cluster.placement_timeout_s)
    except GetTimeoutError:
        remove_placement_group(group)
        available = ray.available_resources()
        raise UserError(
            f"the placement group of {_job(workers)} ({len(bundles)} bundles, strategy {cluster.strategy}) "
            f"was not placed within cluster.placement_timeout_s={cluster.placement_timeout_s:g}: "
            f"available now: {available.get('CPU', 0):g} CPU, {available.get('GPU', 0):g} GPU "
            f"on {len(_alive_nodes(ray))} node(s) (see `ray status`)"
        ) from None
    return group


def _start_learners(ray: Any, group: Any, workers: WorkersConfig) -> list[Any]:
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    actor = ray.remote(_Learner)
    return [
        actor.options(
            num_cpus=workers.cpus_per_policy,
            num_gpus=workers.gpus_per_policy,
            scheduling_strategy=PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i),
        ).remote()
        for i in range(workers.policy)
    ]


def _start_env_workers(
    ray: Any, group: Any, workers: WorkersConfig, namespace: str
) -> tuple[list[list[str]], list[Any]]:
    """Each learner's env workers as named actors (restartable): their names, per learner, and
    their handles (which the driver holds for the job's length: Ray ends an actor, named or not,
    once no handle to it is left)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from distrl.launch.ray_env_workers import EnvWorker
    from distrl.sharding import even_split

    actor = ray.remote(EnvWorker)
    job = secrets.token_hex(4)
    names: list[list[str]] = []
    handles = []
    for rank in range(workers.policy):
        first, count = even_split(workers.env, rank, workers.policy)
        names.append([f"distrl-{job}-env-{rank}-{i}" for i in range(count)])
        for i, name in enumerate(names[-1]):
            handle = actor.options(
                name=name,
                namespace=namespace,
                num_cpus=workers.cpus_per_env,
                max_restarts=-1,  # Ray's bound is per lifetime; the learner bounds failures in a row
                scheduling_strategy=PlacementGroupSchedulingStrategy(
                    group, placement_group_bundle_index=workers.policy + first + i
                ),
            ).remote()
            handles.append(handle)
    ray.get([handle.__ray_ready__.remote() for handle in handles])  # named once this returns
    return names, handles


def _env_workers_env(names: list[str], namespace: str, workers: WorkersConfig) -> dict[str, str]:
    from distrl.launch.ray_env_workers import ENV_WORKERS_VAR

    if not names:
        return {}
    spec = {
        "namespace": namespace,
        "names": names,
        "max_restarts": workers.max_restarts,
        "backoff_s": workers.retry_backoff_s,
    }
    return {ENV_WORKERS_VAR: json.dumps(spec)}


def _rank_env(rank: int, world_size: int, master_addr: str, master_port: int) -> dict[str, str]:
    """torchrun's variables: to the training process a learner is a torchrun rank. Ray gives each
    actor only its own GPUs, so every learner is local rank 0 of its own view."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": "0",
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }


def _wait(ray: Any, runs: list[Any]) -> int:
    """The first non-zero exit status (a learner that died counts as 1, with its cause), else 0."""
    from ray.exceptions import RayActorError, RayTaskError

    pending, status = list(runs), 0
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        rank = runs.index(done[0])
        try:
            code, error = ray.get(done[0])
        except (RayActorError, RayTaskError) as exc:
            code, error = 1, failure_cause(exc)
        if error:
            print(f"distrl: error: policy worker {rank}: {error}", file=sys.stderr)
        if code and not status:
            status = code
    return status


def _import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError(RAY_EXTRA) from None
    return ray
