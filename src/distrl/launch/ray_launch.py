"""``distrl train --launcher ray``: the policy (learner) workers as Ray actors on placement groups.

The driver starts a local Ray instance (dashboard and usage stats off, token authentication on
with the token in Ray's temp dir, not the user's home) or joins one (``--ray-address``), checks
that the config's cluster and workers fit what Ray has, places the virtual cluster (one
placement group per node, ``ray_placement``), and starts the workers there. The learners form
one torch.distributed group among themselves, with the master address and a free port from
learner 0's node (as NeMo RL does), and each
runs the ordinary training process in its actor: same loop, configs, checkpoints and metrics as
torchrun's ranks, which is what they look like to it. The env, eval and data workers are named,
restartable actors the learners look up by name. The driver owns every actor (they share its
fate) and exits with the first failing learner's code; when a learner dies it kills the others
and starts the group again, resuming from the newest checkpoint as a restarted torchrun job does
(at most ``workers.max_restarts`` times).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import logging
import math
import os
import secrets
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from distrl.config import ClusterConfig, RunConfig, WorkersConfig
from distrl.errors import UserError
from distrl.launch.ray_placement import (
    VirtualCluster,
    alive_nodes,
    job_bundles,
    needs,
    node_bundles,
    place,
    worker_groups,
)
from distrl.launch.ray_status import (
    UsageLog,
    forget_learners,
    job_actors,
    learner_usage,
    print_report,
    remote_class,
    sample,
)
from distrl.launch.ray_workers import ActorProcess, actor_process, failure_cause, workers_env

RAY_EXTRA = "--launcher ray needs Ray: pip install 'distrl[ray]'"
STOP_GRACE_S = 30.0
"""How long the other learners may take to end by themselves once one has failed."""
RAY_FLAGS = {"--launcher": True, "--ray-address": True, "--namespace": True}
"""The Ray launcher's own flags (all take a value); they are not passed to the learners."""
RAY_JSON = "ray.json"
"""In the run dir while a local Ray instance runs the job: its address, token and namespace."""
RAY_TEMP_DIR_MAX_CHARS = 40
"""The longest temp dir path Ray's Unix sockets fit under (``<dir>/session_<date>_<time>_<pid>/
sockets/plasma_store``; a socket's path has at most 107 bytes)."""


def launch(
    argv: list[str], cfg: RunConfig, address: str | None, namespace: str, run_dir: Path, overwrite: bool
) -> int:
    """Run the learners of ``distrl train`` ``argv`` on Ray; returns the job's exit status. Every
    ``cluster.usage_every_s`` the driver records each worker's usage in ``run_dir/workers.jsonl``.
    ``overwrite``: ``--overwrite`` was given (and not ``--resume``)."""
    from distrl.launch.file_rendezvous import worker_argv

    check_workers(cfg)
    launcher_flags = dict(RAY_FLAGS)
    with contextlib.ExitStack() as local:
        clear_run_dir = False
        if address is None:
            # The driver overwrites, sparing the local Ray's files in the run dir; the learners must not.
            clear_run_dir = overwrite
            launcher_flags["--overwrite"] = False
            ray, started = local.enter_context(_local_ray(cfg.cluster, run_dir, namespace))
        else:
            ray, started = _import_ray(), None
            _join(ray, address, namespace, log_to_driver=True, runtime_env={"env_vars": _worker_path()})
        learner_argv = [*worker_argv(argv, launcher_flags), "--distributed"]
        return _run_job(ray, learner_argv, cfg, namespace, run_dir, started, clear_run_dir)


def _run_job(
    ray: Any,
    learner_argv: list[str],
    cfg: RunConfig,
    namespace: str,
    run_dir: Path,
    started: str | None,
    clear_run_dir: bool,
) -> int:
    """Place the job's virtual cluster, start its workers and run its learners (``distrl train
    learner_argv`` each), launched again from the newest checkpoint when one dies; Ray is shut
    down at the end, whatever ends it. Once the job is placed (a job that does not fit is its
    one error line alone, and loses nothing), ``started`` is said and, with ``clear_run_dir``,
    the run dir's old run removed."""
    job = f"distrl-{secrets.token_hex(4)}"
    try:
        check_fits(cfg.cluster, cfg.workers, [node["Resources"] for node in alive_nodes(ray)])
        cluster = place(ray, cfg.cluster, cfg.workers, job)
        if started:
            print(started, file=sys.stderr, flush=True)
        if clear_run_dir:
            _clear_run_dir(run_dir)
        profile = (cfg.log.profile_updates, run_dir / "profile")
        timeout_s = cfg.cluster.placement_timeout_s
        names, actors = _start_worker_groups(ray, cluster, cfg.workers, namespace, job, profile)
        retries = cfg.workers.max_restarts, cfg.workers.retry_backoff_s
        learners = _LearnerGroup(
            cluster,
            cfg.workers,
            namespace,
            f"{job}-policy",
            learner_argv,
            [
                workers_env(namespace, *retries, **{g: mine[rank] for g, mine in names.items()})
                for rank in range(cfg.workers.policy)
            ],
            actors,
            UsageLog(run_dir / "workers.jsonl"),
            cfg.cluster.usage_every_s,
            timeout_s,
        )
        for attempt in range(cfg.workers.max_restarts + 1):
            status, died = learners.run(ray, attempt)
            if died is None:
                return status
            if attempt < cfg.workers.max_restarts:
                print(
                    f"distrl: policy worker {died} died; the learners' group is rebuilt and resumes from "
                    f"the newest checkpoint (restart {attempt + 1} of at most {cfg.workers.max_restarts})",
                    file=sys.stderr,
                    flush=True,
                )
        print(
            f"distrl: error: a policy worker died {cfg.workers.max_restarts + 1} times "
            f"(workers.max_restarts={cfg.workers.max_restarts}); the newest checkpoint is kept",
            file=sys.stderr,
        )
        return 1
    finally:
        try:
            forget_learners(job, namespace)
        finally:
            ray.shutdown()


@dataclass
class _LearnerGroup:
    """The learners of one job: launched again, as a restarted torchrun job is, when one dies."""

    cluster: VirtualCluster
    """Where each learner runs (the same bundle in every launch)."""
    workers: WorkersConfig
    namespace: str
    name: str
    """Learner r of launch a is the actor ``<name>-<a>-<r>``."""
    argv: list[str]
    workers_env: list[dict[str, str]]
    """Each learner's worker actors, by name."""
    actors: dict[str, Any]
    """Every env, eval and data worker by name (the driver holds them: Ray ends an actor, named
    or not, once no handle to it is left)."""
    usage: UsageLog
    usage_every_s: float
    placement_timeout_s: float
    """How long a learner may take to start."""

    def run(self, ray: Any, attempt: int) -> tuple[int, int | None]:
        """One launch (``attempt`` > 0 resumes from the newest checkpoint): (exit status, the rank
        of a learner that died, which ends the launch: the others are killed at once rather
        than left waiting in a collective until ``comm.timeout_s``)."""
        learners = _start_learners(ray, self.cluster, self.workers, self.namespace, f"{self.name}-{attempt}")
        # The learners start while the other workers do (every actor imports torch: seconds each).
        workers_ready = [actor.__ray_ready__.remote() for actor in self.actors.values()]
        where = [learner.node_id.remote() for learner in learners]
        node_ids = _ready(ray, [*where, *workers_ready], self.placement_timeout_s)[: len(learners)]
        processes = [actor_process(learner) for learner in learners]  # ready: each has one
        # Learners all on one node listen on the loopback interface only.
        one_node = len(set(node_ids)) == 1
        master_addr, master_port = _ready(
            ray, learners[0].free_address.remote(one_node), self.placement_timeout_s
        )
        # Learners on one Ray node are one torchrun node: under data.layout=split they divide its part.
        node_ranks = {node: index for index, node in enumerate(dict.fromkeys(node_ids))}
        # A restarted group must never wipe the checkpoints it resumes from.
        argv = [arg for arg in self.argv if arg != "--overwrite"] if attempt else self.argv
        runs = [
            learner.train.remote(
                argv,
                {
                    **_rank_env(
                        rank,
                        len(learners),
                        (node_ranks[node_ids[rank]], node_ids.count(node_ids[rank])),
                        (master_addr, master_port),
                        attempt,
                    ),
                    **self.workers_env[rank],
                },
            )
            for rank, learner in enumerate(learners)
        ]
        status, died = _wait(
            ray,
            runs,
            processes,
            self.usage_every_s,
            lambda: self.usage.write(sample(ray, self.actors, "driver")),
        )
        if status:  # none left waiting in a collective until comm.timeout_s
            for learner in learners:
                ray.kill(learner)
        return status, died


def check_workers(cfg: RunConfig) -> None:
    """The worker groups the run's algorithm can use, before Ray starts."""
    workers = cfg.workers
    if workers.policy > 1 and not workers.gpus_per_policy.is_integer():
        raise UserError(
            f"workers.gpus_per_policy={workers.gpus_per_policy:g}: learners sharing a GPU cannot form an "
            "NCCL group; give each whole GPUs (or 0 to train on the CPU)"
        )
    if workers.data:
        _check_data_workers(cfg)
    if workers.env:
        if cfg.ml_framework != "torch" or cfg.data.path is not None:
            raise UserError(
                "workers.env: env workers collect for online PPO and DQN with ml_framework: torch; "
                "set workers.env=0"
            )
        if cfg.train.straggler_threshold is not None:
            raise UserError(
                "train.straggler_threshold: env workers always collect whole rollouts; "
                "unset it or set workers.env=0"
            )
        _one_per_learner_at_least("env", workers.env, workers.policy)


def _check_data_workers(cfg: RunConfig) -> None:
    workers = cfg.workers
    if cfg.data.path is None or cfg.ml_framework != "torch":
        raise UserError(
            "workers.data: data workers read data.path for offline DQN; set data.path or workers.data=0"
        )
    _one_per_learner_at_least("data", workers.data, workers.policy)


def _one_per_learner_at_least(group: str, count: int, learners: int) -> None:
    """Env and data workers are shared out over the learners: each needs one of its own."""
    if count < learners:
        raise UserError(
            f"workers.{group}={count} is fewer than the {learners} learners (workers.policy): "
            f"give each learner at least one, or set workers.{group}=0"
        )


def check_fits(cluster: ClusterConfig, workers: WorkersConfig, nodes: list[dict[str, float]]) -> None:
    """One line naming what does not fit, before anything starts; ``nodes``: each alive Ray
    node's resources."""
    nodes_need = [needs(bundles) for bundles in node_bundles(cluster.num_nodes, job_bundles(workers))[0]]
    used = sum(1 for need in nodes_need if need["CPU"] or need["GPU"])
    if cluster.strategy == "SPREAD" and used > len(nodes):
        raise UserError(
            f"cluster.num_nodes={cluster.num_nodes}: the Ray cluster has {len(nodes)} alive node(s) "
            "(cluster.strategy=SPREAD puts each node's workers on a Ray node of their own; "
            "PACK lets them share)"
        )
    budget = {"CPU": cluster.cpus_per_node, "GPU": float(cluster.gpus_per_node)}
    for resource, limit in budget.items():
        need = sum(node[resource] for node in nodes_need)
        if limit is not None and need > limit * cluster.num_nodes:
            raise UserError(
                f"{_job(workers)} need {need:g} {resource} in all: more than "
                f"cluster.{resource.lower()}s_per_node x num_nodes = {limit * cluster.num_nodes:g}"
            )
        have = sum(node.get(resource, 0.0) for node in nodes)
        if need > have:
            raise UserError(f"{_job(workers)} need {need:g} {resource} in all; the Ray cluster has {have:g}")
        largest = max((node.get(resource, 0.0) for node in nodes), default=0.0)
        for index, node_need in enumerate(nodes_need):
            where = (
                f"node {index} of the job needs {node_need[resource]:g} {resource} on one Ray node"
                f" (each group's workers are split evenly over cluster.num_nodes={cluster.num_nodes}, "
                "learners first)"
            )
            if limit is not None and node_need[resource] > limit:
                raise UserError(f"{where}: more than cluster.{resource.lower()}s_per_node = {limit:g}")
            if node_need[resource] > largest:
                raise UserError(f"{where}: the largest Ray node has {largest:g}")


def _job(workers: WorkersConfig) -> str:
    groups = [f"workers.{group}={count}" for group, (count, _) in worker_groups(workers).items() if count]
    return " and ".join([f"workers.policy={workers.policy}", *groups])


class _Learner:
    """One policy worker: a rank of the learners' group, training in its own actor process."""

    def __init__(self) -> None:
        # The training stack's imports while the env, eval and data workers start: seconds, torch's
        # the most (torch._dynamo: the first optimizer torch builds imports it).
        import torch._dynamo  # noqa: F401

        import distrl.launch.process_group  # noqa: F401
        import distrl.runners  # noqa: F401

    def node_id(self) -> str:
        import ray

        return ray.get_runtime_context().get_node_id()

    def free_address(self, loopback: bool) -> tuple[str, int]:
        """This node's address (127.0.0.1 if ``loopback``) and a port free on it, for the group's
        TCP store."""
        import ray

        host = "127.0.0.1" if loopback else ray.util.get_node_ip_address()
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


@contextlib.contextmanager
def _local_ray(cluster: ClusterConfig, run_dir: Path, namespace: str) -> Iterator[tuple[Any, str]]:
    """A local Ray instance for the job: dashboard and usage statistics off, token authentication
    on, its sessions, logs and token in ``cluster.ray_temp_dir`` or else ``<run_dir>/ray``
    (through a short link in the system's temp dir where that path is too long for Ray's Unix
    sockets). While it runs, ``<run_dir>/ray.json`` says where it listens and where its token is
    (``distrl status --run-dir``). Yields the ``ray`` module and a line saying so."""
    temp_dir = Path(cluster.ray_temp_dir).resolve() if cluster.ray_temp_dir else run_dir / "ray"
    for directory in (run_dir, temp_dir):
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(
                f"cannot write {directory} for the local Ray instance: {exc.strerror or exc}"
            ) from None
    token = _token_auth(temp_dir)
    ray = _import_ray()  # after the auth variables: Ray reads them when it is imported
    # The local Ray's processes inherit the driver's environment: setting it here spares every
    # actor the per-job runtime env, which Ray starts fresh worker processes for (~0.3 s each).
    os.environ.update(_worker_path())
    with contextlib.ExitStack() as cleanup:
        short = temp_dir
        if len(str(temp_dir)) > RAY_TEMP_DIR_MAX_CHARS:
            link_dir = Path(tempfile.mkdtemp(prefix="distrl-ray-"))
            cleanup.callback(shutil.rmtree, link_dir, ignore_errors=True)
            short = link_dir / "r"
            short.symlink_to(temp_dir, target_is_directory=True)
        ray.init(
            namespace=namespace,
            logging_level=logging.WARNING,
            include_dashboard=False,
            _temp_dir=str(short),
            log_to_driver=True,
        )
        cleanup.callback(ray.shutdown)  # first of all, when the job ends (a second call does nothing)
        where = run_dir / RAY_JSON
        where.write_text(
            json.dumps(
                {
                    "address": ray.get_runtime_context().gcs_address,
                    "token_path": str(token),
                    "namespace": namespace,
                }
            )
        )
        cleanup.callback(where.unlink, missing_ok=True)
        yield (
            ray,
            (
                f"distrl: started a local Ray instance (logs in {temp_dir}/session_latest/logs); "
                f"`distrl status --run-dir {run_dir}` shows the job's workers"
            ),
        )


def _clear_run_dir(run_dir: Path) -> None:
    """``--overwrite`` under a local Ray: everything in the run dir but that Ray's own files."""
    for entry in run_dir.iterdir():
        if entry.name in ("ray", RAY_JSON):
            continue
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except OSError as exc:
            raise UserError(f"--overwrite: cannot remove {entry}: {exc.strerror or exc}") from None


def local_job_cluster(run_dir: Path) -> tuple[str, str]:
    """The address and namespace of the local Ray instance a job in ``run_dir`` started, with its
    token set for Ray to read (``distrl status --run-dir``)."""
    where = run_dir / RAY_JSON
    try:
        cluster = json.loads(where.read_text())
        address, token, namespace = cluster["address"], cluster["token_path"], cluster["namespace"]
    except (OSError, ValueError, KeyError, TypeError):
        raise UserError(
            f"--run-dir {run_dir}: no job there runs its own local Ray instance ({RAY_JSON} is in the "
            "run dir while `distrl train --launcher ray` without --ray-address runs)"
        ) from None
    if (why := _unreachable(address)) is not None:  # the driver was killed and left the file
        raise UserError(f"--run-dir {run_dir}: the job's local Ray instance at {address} has ended ({why})")
    _use_token(Path(token))
    return address, namespace


def _token_auth(temp_dir: Path) -> Path:
    """Token authentication for the local Ray instance about to start: the token in its temp dir
    (not the user's home), the mode and the token's path in the environment, which Ray reads
    when imported and its processes inherit. Returns the token's path."""
    token = temp_dir / "auth_token"
    if not token.exists():
        token.touch(mode=0o600)
        token.write_text(secrets.token_hex(32))
    _use_token(token)
    return token


def _use_token(token: Path) -> None:
    """Token authentication with ``token``, in the environment: Ray reads it when imported, and
    the processes it starts inherit it."""
    os.environ["RAY_AUTH_MODE"] = "token"
    os.environ["RAY_AUTH_TOKEN_PATH"] = str(token)


def _join(ray: Any, address: str, namespace: str, **options: Any) -> None:
    # Ray itself retries an address where nothing listens for minutes: probe it first.
    why = _unreachable(address)
    try:
        if why is None:  # Ray's INFO lines would bury distrl's own (an error is one line)
            ray.init(address=address, namespace=namespace, logging_level=logging.WARNING, **options)
    except (ConnectionError, ray.exceptions.AuthenticationError) as exc:  # no cluster, a wrong token
        why = str(exc).splitlines()[0]
    if why is not None:
        raise UserError(
            f"--ray-address {address}: no Ray cluster answers there ({why}); start one "
            "(`ray start --head --port=6379`) or leave --ray-address out to start a local one"
        )


def _unreachable(address: str, timeout_s: float = 5.0) -> str | None:
    """Why nothing accepts a TCP connection at ``HOST:PORT``, or None (also for ``auto``, which
    Ray resolves itself, failing fast)."""
    host, _, port = address.rpartition(":")
    if address == "auto" or "://" in address:
        return None
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return None
    except ValueError:
        return f"{port!r} is not a port"
    except OSError as exc:
        return exc.strerror or str(exc)


def status(address: str, namespace: str, as_json: bool) -> int:
    """``distrl status``: the cluster's resources and the running jobs' workers, with state,
    restarts, node, CPU, memory, GPU memory and work done (``ray_status``)."""
    ray = _import_ray()
    _join(ray, address, namespace, log_to_driver=False)
    try:
        total, available = ray.cluster_resources(), ray.available_resources()
        workers = job_actors(ray, namespace)
        alive = {w["name"]: w["group"] for w in workers if w["state"] == "ALIVE"}
        # Learners cannot answer while they train (``ray_status``): they publish their usage.
        learners = [name for name, group in alive.items() if group == "policy"]
        asked = [name for name, group in alive.items() if group != "policy"]
        usage = {
            **sample(ray, _handles(ray, asked, namespace), "status"),
            **learner_usage(learners, namespace),
        }
        for worker in workers:
            worker.update(usage.get(worker["name"], {}))
        report = {
            "namespace": namespace,
            "nodes": len(alive_nodes(ray)),
            "resources": {
                name: [available.get(name, 0.0), total.get(name, 0.0)] for name in ("CPU", "GPU", "memory")
            },
            "workers": workers,
        }
    finally:
        ray.shutdown()
    if as_json:
        print(json.dumps(report))
    else:
        print_report(report)
    return 0


def _handles(ray: Any, names: list[str], namespace: str) -> dict[str, Any]:
    """The named actors still there (a job may end between listing its actors and asking them)."""
    handles = {}
    for name in names:
        with contextlib.suppress(ValueError):
            handles[name] = ray.get_actor(name, namespace=namespace)
    return handles


def _worker_path() -> dict[str, str]:
    """The job's workers import from where the driver runs (a user's own env classes) too."""
    paths = [os.getcwd(), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {"PYTHONPATH": os.pathsep.join(paths)}


def _start_learners(
    ray: Any, cluster: VirtualCluster, workers: WorkersConfig, namespace: str, name: str
) -> list[Any]:
    """The learners, named ``<name>-<rank>`` (``distrl status`` finds them by name)."""
    actor = ray.remote(_Learner)
    return [
        actor.options(
            name=f"{name}-{i}",
            namespace=namespace,
            num_cpus=workers.cpus_per_policy,
            num_gpus=workers.gpus_per_policy,
            scheduling_strategy=cluster.scheduling("policy", i),
        ).remote()
        for i in range(workers.policy)
    ]


def _start_worker_groups(
    ray: Any,
    cluster: VirtualCluster,
    workers: WorkersConfig,
    namespace: str,
    job: str,
    profile: tuple[int, Path],
) -> tuple[dict[str, list[list[str]]], dict[str, Any]]:
    """The env, eval and data workers as named, restartable actors: their names by group and
    learner (env and data workers shared out over the learners, eval workers all rank 0's), and
    their handles, which the driver holds for the job's length (Ray ends an actor, named or not,
    once no handle to it is left)."""
    from distrl.sharding import even_split

    classes = _worker_classes(workers)
    names: dict[str, list[list[str]]] = {}
    handles = {}
    for name, (count, cpus) in worker_groups(workers).items():
        names[name] = [[] for _ in range(workers.policy)]
        if not count:
            continue
        actor = remote_class(ray, classes[name])
        for rank in range(workers.policy):
            shared_out = name != "eval"
            first, mine = even_split(count, rank, workers.policy) if shared_out else (0, count * (rank == 0))
            names[name][rank] = [f"{job}-{name}-{rank}-{i}" for i in range(mine)]
            for i, actor_name in enumerate(names[name][rank]):
                handle = actor.options(
                    name=actor_name,
                    namespace=namespace,
                    num_cpus=cpus,
                    max_restarts=-1,  # Ray's bound is per lifetime; the learner bounds failures in a row
                    scheduling_strategy=cluster.scheduling(name, first + i),
                ).remote(profile[0], str(profile[1] / f"{actor_name}.json"))
                handles[actor_name] = handle
    return names, handles


WORKER_CLASSES = {
    "env": ("distrl.launch.ray_env_workers", "EnvWorker"),
    "eval": ("distrl.launch.ray_eval_workers", "EvalWorker"),
    "data": ("distrl.launch.ray_data_workers", "DataWorker"),
}
"""Each worker group's actor class (module, name)."""


def _worker_classes(workers: WorkersConfig) -> dict[str, type]:
    """The actor classes of the groups the job has (their modules import torch: a job of
    learners alone spares the driver that). Imported in a thread during ``ray.init`` they took
    the GIL from it and slowed it by as much as they saved."""
    return {
        group: getattr(importlib.import_module(WORKER_CLASSES[group][0]), WORKER_CLASSES[group][1])
        for group, (count, _) in worker_groups(workers).items()
        if count
    }


def _ready(ray: Any, refs: Any, timeout_s: float) -> Any:
    """``ray.get(refs)`` of actors just started: one line, not a hang or a traceback, when one
    cannot start (its constructor or an import failed on its node, or no node has room)."""
    from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

    try:
        return ray.get(refs, timeout=timeout_s)
    except GetTimeoutError:
        raise UserError(
            f"the job's actors did not start within cluster.placement_timeout_s={timeout_s:g} "
            "(see `ray status` and `ray logs`)"
        ) from None
    except (RayActorError, RayTaskError) as exc:
        raise UserError(f"an actor of the job could not start: {failure_cause(exc)}") from None


def _rank_env(
    rank: int, world_size: int, node: tuple[int, int], master: tuple[str, int], attempt: int
) -> dict[str, str]:
    """torchrun's variables: to the training process a learner is a torchrun rank (of restart
    ``attempt``) on ``node`` (its rank, and the learners on it). Ray gives each actor only its own
    GPUs, so every learner is local rank 0 of its own view."""
    node_rank, learners_on_node = node
    return {
        "RANK": str(rank),
        "GROUP_RANK": str(node_rank),
        "LOCAL_RANK": "0",
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(learners_on_node),
        "MASTER_ADDR": master[0],
        "MASTER_PORT": str(master[1]),
        "TORCHELASTIC_RESTART_COUNT": str(attempt),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }


def _wait(
    ray: Any,
    runs: list[Any],
    processes: list[ActorProcess | None],
    every_s: float,
    meanwhile: Callable[[], None],
) -> tuple[int, int | None]:
    """(the first non-zero exit status, else 0; the rank of a learner that died, which ends the
    wait at once, else None), calling ``meanwhile`` every ``every_s`` while none ends. Once a
    learner has failed the others get ``STOP_GRACE_S`` to end by themselves (a preempted group
    ends together) before the wait gives up on them. A learner's error and a death's cause are
    one line each."""
    from ray.exceptions import RayActorError, RayTaskError

    pending, status, stop_by = list(runs), 0, math.inf
    while pending and time.monotonic() < stop_by:
        done, pending = ray.wait(pending, num_returns=1, timeout=min(every_s, STOP_GRACE_S))
        if not done:
            meanwhile()
            continue
        rank = runs.index(done[0])
        try:
            code, error = ray.get(done[0])
        except RayActorError as exc:
            cause = failure_cause(exc, processes[rank])
            print(f"distrl: policy worker {rank} died: {cause}", file=sys.stderr, flush=True)
            return 1, rank
        except RayTaskError as exc:
            code, error = 1, failure_cause(exc)
        if error:
            print(f"distrl: error: policy worker {rank}: {error}", file=sys.stderr)
        if code and not status:
            status, stop_by = code, time.monotonic() + STOP_GRACE_S
    return status, None


def _import_ray() -> Any:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # read when Ray is imported
    try:
        import ray
    except ImportError:
        raise UserError(RAY_EXTRA) from None
    return ray
