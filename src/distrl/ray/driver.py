"""``distrl train --launcher ray``: the job's learners and worker groups as Ray actors on a
virtual cluster of placement groups.

The driver starts a local Ray instance or joins one (``ray.cluster``), checks that the config's
cluster and workers fit what Ray has, places the virtual cluster (one placement group per node,
``ray.placement``), starts the run's worker groups there as named, restartable actors (env, eval
and data workers, or its algorithm's own: ``ray.groups``), and runs the learners
(``ray.learners``) with its own validated config. The driver owns every actor (they share its
fate) and exits with the first failing learner's code; when a learner dies the group is launched
again from the newest checkpoint (at most ``workers.max_restarts`` times).
"""

from __future__ import annotations

import contextlib
import functools
import math
import secrets
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from distrl.algos.registry import (
    ENVS,
    JAX,
    JAX_NATIVE_ENVS,
    WorkerGroup,
    load,
)
from distrl.collect.ahead import check_transport, transport
from distrl.config.rules import collecting_workers
from distrl.config.run import RunConfig
from distrl.config.run_algorithm import check_acting, learns_from, runner_reference
from distrl.config.sections import ClusterConfig, WorkersSection
from distrl.errors import UserError
from distrl.launch.preemption import PreemptionFlag
from distrl.launch.run_dir import RunDir
from distrl.ray.cluster import clear_run_dir, import_ray, join, local_ray, worker_path
from distrl.ray.groups import run_groups
from distrl.ray.learners import LearnerGroup
from distrl.ray.placement import (
    VirtualCluster,
    alive_nodes,
    job_bundles,
    needs,
    node_bundles,
    place,
    worker_groups,
)
from distrl.ray.status import UsageLog, forget_learners, remote_class
from distrl.ray.workers import Retries, workers_spec


def launch(
    cfg: RunConfig, address: str | None, namespace: str, run_dir: RunDir, dry_run: bool = False
) -> int:
    """Run the job on Ray (a local instance when ``address`` is None); returns its exit status.
    Every ``cluster.usage_every_s`` the driver records each worker's usage in the run dir's
    ``workers.jsonl``. ``dry_run``: the learners join their group and print what each sees, as
    ``distrl train --dry-run`` does, and train nothing."""
    check_workers(cfg)
    with contextlib.ExitStack() as local:
        clear = False
        if address is None:
            # The driver overwrites, sparing the local Ray's files in the run dir; the learners must not.
            clear, run_dir = run_dir.overwrite, replace(run_dir, overwrite=False)
            ray, started = local.enter_context(local_ray(cfg.cluster, run_dir.path, namespace))
        else:
            ray, started = import_ray(), None
            join(ray, address, namespace, log_to_driver=True, runtime_env={"env_vars": worker_path()})
        # A scheduler's SIGTERM to the driver reaches the learners as a preemption (a checkpoint,
        # exit 75), not as their owner's death (killed where they stand, their updates since the
        # last checkpoint lost). Installed once Ray runs: ray.init sets a handler of its own, which
        # ends the process.
        preemption = PreemptionFlag()
        preemption.install()
        local.callback(preemption.restore)
        return _run_job(ray, cfg, namespace, run_dir, started, clear, dry_run, preemption)


def _run_job(
    ray: Any,
    cfg: RunConfig,
    namespace: str,
    run_dir: RunDir,
    started: str | None,
    clear: bool,
    dry_run: bool,
    preemption: PreemptionFlag,
) -> int:
    """Place the job's virtual cluster, start its workers and run its learners, launched again
    from the newest checkpoint when one dies; Ray is shut down at the end, whatever ends it.
    Once the job is placed (a job that does not fit is its one error line alone, and loses
    nothing), ``started`` is said and, with ``clear``, the run dir's old run removed."""
    job = f"distrl-{secrets.token_hex(4)}"
    try:
        check_fits(
            cfg.cluster, cfg.workers, run_groups(cfg), [node["Resources"] for node in alive_nodes(ray)]
        )
        cluster = place(ray, cfg.cluster, cfg.workers, job)
        if started:
            print(started, file=sys.stderr, flush=True)
        if clear:
            clear_run_dir(run_dir.path)
        profile = (cfg.log.profile_updates, run_dir.path / "profile")
        names, actors = _start_worker_groups(ray, cluster, cfg, namespace, job, profile)
        workers = cfg.workers
        retries = Retries(workers.max_restarts, workers.retry_backoff_s, workers.call_timeout_s)
        specs = [
            workers_spec(namespace, retries, **{g: mine[rank] for g, mine in names.items()})
            for rank in range(cfg.workers.policy)
        ]
        usage = UsageLog(run_dir.path / "workers.jsonl")
        learners = LearnerGroup(
            cluster, cfg, namespace, f"{job}-policy", run_dir, specs, actors, usage, dry_run, preemption
        )
        return _run_learners(ray, learners, cfg.workers.max_restarts)
    finally:
        try:
            forget_learners(job, namespace)
        finally:
            ray.shutdown()


def _run_learners(ray: Any, learners: LearnerGroup, max_restarts: int) -> int:
    """The learners' exit status, their group launched again after a death, at most
    ``max_restarts`` times."""
    for attempt in range(max_restarts + 1):
        status, died = learners.run(ray, attempt)
        if died is None:
            return status
        if attempt < max_restarts:
            print(
                f"distrl: learner {died} (a policy worker) died; the learners' group is rebuilt and "
                f"resumes from the newest checkpoint (restart {attempt + 1} of at most {max_restarts})",
                file=sys.stderr,
                flush=True,
            )
    print(
        f"distrl: error: a learner (policy worker) died {max_restarts + 1} times "
        f"(workers.max_restarts={max_restarts}); the newest checkpoint is kept",
        file=sys.stderr,
    )
    return 1


def check_workers(cfg: RunConfig) -> None:
    """The run's algorithm trains as configured, and the worker groups it can use, before Ray starts."""
    runner_reference(cfg)
    if cfg.collect.processes:
        raise UserError(
            f"collect.processes={cfg.collect.processes}: in Ray mode env workers (workers.env) step a "
            "learner's envs; set collect.processes=0",
            code="ray-collect-processes",
        )
    counts = {group: getattr(cfg.workers, group, 0) for group in ("env", "generation")}
    check_transport(cfg.collect, transport(cfg.collect, counts["env"], counts["generation"]))
    if cfg.collect.ahead() and not collecting_workers(cfg):
        raise UserError(
            f"{cfg.collect.ahead()}: in Ray mode env or generation workers (workers.env, "
            "workers.generation) collect ahead of a learner; set one to 1 or more",
            code="ray-collect-ahead-without-workers",
        )
    workers = cfg.workers
    if workers.policy > 1 and not workers.gpus_per_policy.is_integer():
        raise UserError(
            f"workers.gpus_per_policy={workers.gpus_per_policy:g}: learners sharing a GPU cannot form an "
            "NCCL group; give each whole GPUs (or 0 to train on the CPU)",
            code="ray-gpu-shared-by-learners",
        )
    for name, group in run_groups(cfg).items():
        count = getattr(workers, name)
        if not count:
            continue
        if group.check is not None:
            load(group.check)(cfg)
        if name == "env" and learns_from(cfg) == ENVS:
            check_acting(cfg, f"workers.env={count}", "env workers")
        if group.shared_out:
            _one_per_learner_at_least(name, count, workers.policy)
    if learns_from(cfg) in (JAX, JAX_NATIVE_ENVS):
        raise UserError(
            "ml_framework: jax across processes needs distrl's JAX launcher, not ray: "
            "python -m distrl.launch.jax --nproc_per_node=N -m distrl.train ... --ml-framework jax",
            code="launch-jax-needs-jax-launcher",
        )


def _one_per_learner_at_least(group: str, count: int, learners: int) -> None:
    """A group shared out over the learners (env, data workers) gives each one of its own."""
    if count < learners:
        raise UserError(
            f"workers.{group}={count} is fewer than the {learners} learners (workers.policy): "
            f"give each learner at least one, or set workers.{group}=0",
            code="ray-workers-fewer-than-learners",
        )


def check_fits(
    cluster: ClusterConfig,
    workers: WorkersSection,
    groups: dict[str, WorkerGroup],
    nodes: list[dict[str, float]],
) -> None:
    """One line naming what does not fit and settings that would, before anything starts;
    ``groups``: the run's worker groups (``ray.groups.run_groups``), ``nodes``: each alive Ray
    node's resources."""
    shared_out = {name for name, group in groups.items() if group.shared_out}
    way_out = functools.partial(_way_out, workers, shared_out)
    bundles, slots = node_bundles(cluster.num_nodes, job_bundles(workers))
    nodes_need = [needs(mine) for mine in bundles]
    counts = [
        {group: sum(n == node for n, _ in mine) for group, mine in slots.items()}
        for node in range(len(bundles))
    ]
    used = sum(1 for need in nodes_need if need["CPU"] or need["GPU"])
    if cluster.strategy == "SPREAD" and used > len(nodes):
        raise UserError(
            f"cluster.num_nodes={cluster.num_nodes}: the Ray cluster has {len(nodes)} alive node(s) "
            "(cluster.strategy=SPREAD puts each node's workers on a Ray node of their own; "
            f"PACK lets them share): set cluster.strategy=PACK or cluster.num_nodes={len(nodes)}, "
            "or join a cluster with more nodes with --ray-address",
            code="ray-nodes-too-few",
        )
    budget = {"CPU": cluster.cpus_per_node, "GPU": float(cluster.gpus_per_node)}
    totals = [{group: count for group, (count, _) in job_bundles(workers).items()}]
    for resource, limit in budget.items():
        need = sum(node[resource] for node in nodes_need)
        # Raising the config's limit to the largest node's need makes every node fit it.
        raise_limit = f"raise cluster.{resource.lower()}s_per_node to {_at_least(resource, nodes_need)}"
        if limit is not None and need > limit * cluster.num_nodes:
            raise UserError(
                f"{_job(workers)} need {need:g} {resource} in all: more than "
                f"cluster.{resource.lower()}s_per_node x num_nodes = {limit * cluster.num_nodes:g}"
                + way_out(resource, totals, limit * cluster.num_nodes, raise_limit),
                code="ray-exceeds-config-cluster",
            )
        have = sum(node.get(resource, 0.0) for node in nodes)
        if need > have:
            raise UserError(
                f"{_job(workers)} need {need:g} {resource} in all; the Ray cluster has {have:g}"
                + way_out(resource, totals, have, LARGER_CLUSTER),
                code="ray-exceeds-ray-cluster",
            )
        largest = max((node.get(resource, 0.0) for node in nodes), default=0.0)
        for index, node_need in enumerate(nodes_need):
            where = (
                f"node {index} of the job needs {node_need[resource]:g} {resource} on one Ray node"
                f" (each group's workers are split evenly over cluster.num_nodes={cluster.num_nodes}, "
                "learners first)"
            )
            if limit is not None and node_need[resource] > limit:
                raise UserError(
                    f"{where}: more than cluster.{resource.lower()}s_per_node = {limit:g}"
                    + way_out(resource, counts, limit, raise_limit),
                    code="ray-node-exceeds-config-node",
                )
            if node_need[resource] > largest:
                raise UserError(
                    f"{where}: the largest Ray node has {largest:g}"
                    + way_out(
                        resource,
                        counts,
                        largest,
                        "join a cluster with larger nodes with --ray-address",
                    ),
                    code="ray-node-exceeds-largest-node",
                )


LARGER_CLUSTER = "join a larger Ray cluster with --ray-address"


def _way_out(
    workers: WorkersSection,
    shared_out: set[str],
    resource: str,
    counts: list[dict[str, int]],
    room: float,
    otherwise: str,
) -> str:
    """The end of a refusal: settings with which the job's ``resource`` fits ``room`` on each of
    ``counts`` (workers per group; one entry: the whole job), then ``otherwise``; ``shared_out``:
    the groups of which each learner needs one of its own."""
    per_worker = {group: bundle.get(resource, 0.0) for group, (_, bundle) in job_bundles(workers).items()}
    fixes = _fewer_workers(workers, shared_out, per_worker, counts[0], room) if len(counts) == 1 else []
    for group, share in per_worker.items():
        if not share or not any(count.get(group) for count in counts):
            continue
        # The share each of the group's workers may have so that every node fits.
        fits = min(
            (room - sum(c * per_worker[g] for g, c in count.items() if g != group)) / count[group]
            for count in counts
            if count.get(group)
        )
        smaller = (
            math.floor(fits) if resource == "GPU" and workers.policy > 1 else math.floor(fits * 100) / 100
        )
        if 0 < smaller < share:
            fixes.append(f"workers.{resource.lower()}s_per_{group}={smaller:g}")
    if resource == "GPU":
        fixes.append("workers.gpus_per_policy=0 (learners on the CPU)")
    return f": set {' or '.join(fixes)}, or {otherwise}" if fixes else f": {otherwise}"


def _fewer_workers(
    workers: WorkersSection,
    shared_out: set[str],
    per_worker: dict[str, float],
    count: dict[str, int],
    room: float,
) -> list[str]:
    """A smaller count of one group with which the job's need fits ``room``, group by group."""
    excess = sum(count[group] * share for group, share in per_worker.items()) - room
    fixes = []
    for group, share in per_worker.items():
        if not share or not count[group]:
            continue
        keep = count[group] - math.ceil(excess / share - 1e-9)
        if group in shared_out and keep < workers.policy:
            keep = 0  # every learner needs one of its own, or none has any
        if keep >= (1 if group == "policy" else 0):
            fixes.append(f"workers.{group}={keep}")
    return fixes


def _at_least(resource: str, nodes_need: list[dict[str, float]]) -> str:
    largest = max(node[resource] for node in nodes_need)
    return f"{math.ceil(largest) if resource == 'GPU' else largest:g}"


def _job(workers: WorkersSection) -> str:
    groups = [f"workers.{group}={count}" for group, (count, _) in worker_groups(workers).items() if count]
    return " and ".join([f"workers.policy={workers.policy}", *groups])


def _start_worker_groups(
    ray: Any,
    cluster: VirtualCluster,
    cfg: RunConfig,
    namespace: str,
    job: str,
    profile: tuple[int, Path],
) -> tuple[dict[str, list[list[str]]], dict[str, Any]]:
    """The run's worker groups (``ray.groups.run_groups``) as named, restartable actors: their
    names by group and learner (a group shared out over the learners, or all rank 0's, as eval
    workers are), and their handles, which the driver holds for the job's length (Ray ends an
    actor, named or not, once no handle to it is left)."""
    from distrl.sharding import even_split

    workers = cfg.workers
    groups = run_groups(cfg)
    names: dict[str, list[list[str]]] = {}
    handles = {}
    for name, (count, cpus) in worker_groups(workers).items():
        names[name] = [[] for _ in range(workers.policy)]
        if not count:
            continue
        # Imported only for a group the job has: their modules import torch, which a job of
        # learners alone spares the driver.
        actor = remote_class(ray, load(groups[name].actor))
        for rank in range(workers.policy):
            shared_out = groups[name].shared_out
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
