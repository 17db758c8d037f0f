"""Ray mode's learners (the seeds' policy workers): the ranks of one torch.distributed group,
each training in an actor of its own through ``entry.train_process``, as a torchrun rank does.

The driver hands each learner its validated config, its ``Topology`` (the master address and a
free port from learner 0's node, as NeMo RL does) and its worker actors by name, as data; a
learner returns its exit status and its one-line error as values. When a learner dies the
others are killed and the group is launched again (``LearnerGroup.run``), resuming from the
newest checkpoint as a restarted torchrun job does.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from distrl.algos.registry import load
from distrl.config.run import RunConfig
from distrl.errors import UserError
from distrl.launch.preemption import PreemptionFlag
from distrl.launch.run_dir import RunDir
from distrl.launch.topology import Topology
from distrl.ray.groups import run_groups
from distrl.ray.placement import VirtualCluster
from distrl.ray.status import LEARNER_KEY, LearnerStatus, UsageLog, sample
from distrl.ray.workers import ActorProcess, actor_process, failure_cause, record_error

if TYPE_CHECKING:
    from distrl.runners.base import RemoteWorkers

STOP_GRACE_S = 30.0
"""How long the other learners may take to end by themselves once one has failed."""
PREEMPTION_CHECK_S = 1.0
"""How often the driver looks whether it was sent a preemption signal while the learners train."""


@dataclass
class LearnerGroup:
    """The learners of one job: launched again, as a restarted torchrun job is, when one dies."""

    cluster: VirtualCluster
    """Where each learner runs (the same bundle in every launch)."""
    cfg: RunConfig
    """The driver's validated config: every launch trains with it, whatever became of the file."""
    namespace: str
    name: str
    """Learner r of launch a is the actor ``<name>-<a>-<r>``."""
    run_dir: RunDir
    workers: list[dict[str, Any]]
    """Each learner's worker actors, by group (``ray.workers.workers_spec``)."""
    actors: dict[str, Any]
    """Every worker beside the learners by name (the driver holds them: Ray ends an actor, named
    or not, once no handle to it is left)."""
    usage: UsageLog
    dry_run: bool = False
    """The learners join their group and print what each sees (``entry.dry_run``), no more."""
    preemption: PreemptionFlag = field(default_factory=PreemptionFlag)
    """The driver's own preemption signal (installed by the driver), passed on to the learners."""

    def run(self, ray: Any, attempt: int) -> tuple[int, int | None]:
        """One launch (``attempt`` > 0 resumes from the newest checkpoint): (exit status, the rank
        of a learner that died, which ends the launch: the others are killed at once rather
        than left waiting in a collective until ``comm.timeout_s``)."""
        timeout_s = self.cfg.cluster.placement_timeout_s
        launch = f"{self.name}-{attempt}"
        learners = start_learners(ray, self.cluster, self.cfg, self.namespace, launch)
        # The learners start while the other workers do (every actor imports torch: seconds each).
        workers_ready = {name: actor.__ray_ready__.remote() for name, actor in self.actors.items()}
        where = [learner.node_id.remote() for learner in learners]
        node_ids = ready(ray, where, timeout_s, self.run_dir.path)
        self._workers_ready(ray, workers_ready, time.monotonic() + timeout_s)
        processes = [actor_process(learner) for learner in learners]  # ready: each has one
        # Learners all on one node listen on the loopback interface only.
        one_node = len(set(node_ids)) == 1
        master = ready(ray, learners[0].free_address.remote(one_node), timeout_s, self.run_dir.path)
        # Learners on one Ray node are one torchrun node: under data.layout=split they divide its part.
        node_ranks = {node: index for index, node in enumerate(dict.fromkeys(node_ids))}
        # A restarted group must never wipe the checkpoints it resumes from.
        run_dir = replace(self.run_dir, overwrite=False) if attempt else self.run_dir
        runs = [
            learner.train.remote(
                self.cfg,
                learner_topology(
                    rank,
                    len(learners),
                    (node_ranks[node_ids[rank]], node_ids.count(node_ids[rank])),
                    master,
                    attempt,
                ),
                run_dir,
                self.workers[rank],
                self.dry_run,
            )  # fmt: skip
            for rank, learner in enumerate(learners)
        ]
        status, died = _wait(
            ray,
            runs,
            processes,
            self.cfg.cluster.usage_every_s,
            lambda: self.usage.write(sample(ray, self.actors, "driver")),
            self.run_dir.path,
            self.preemption,
            lambda: _all_training(self.namespace, [f"{launch}-{rank}" for rank in range(len(learners))]),
        )
        if status:  # none left waiting in a collective until comm.timeout_s
            for learner in learners:
                ray.kill(learner)
        return status, died

    def _workers_ready(self, ray: Any, sent: dict[str, Any], deadline: float) -> None:
        """Wait for the workers beside the learners (``sent``: each one's readiness probe); one
        that Ray is restarting (killed, or killed as hung, just before this launch) is asked
        again until it is back or ``deadline`` passes, when ``ready`` says why in one line."""
        from ray.exceptions import ActorUnavailableError

        for name, first_probe in sent.items():
            probe = first_probe
            while time.monotonic() < deadline:
                try:
                    ray.get(probe, timeout=max(deadline - time.monotonic(), 0.0))
                    break
                except ActorUnavailableError:
                    time.sleep(0.5)
                    probe = self.actors[name].__ray_ready__.remote()
                except Exception:  # said by ready, below
                    break
            ready(ray, probe, max(deadline - time.monotonic(), 0.0), self.run_dir.path)


class Learner:
    """One learner: a rank of the learners' group, training in its own actor process."""

    def __init__(self, cfg: RunConfig) -> None:
        # The training stack's imports while the workers beside the learners start: seconds, torch's
        # the most (torch._dynamo: the first optimizer torch builds imports it).
        import torch._dynamo  # noqa: F401

        from distrl.config.run_algorithm import runner_class

        runner_class(cfg)  # its module, imported now

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

    def train(
        self, cfg: RunConfig, topology: Topology, run_dir: RunDir, workers: dict[str, Any], dry_run: bool
    ) -> tuple[int, str, str]:
        """The training process's exit status, its error when it stopped on bad input or a failed
        collective, and rank 0's last line (what it trained and why it stopped): values, not
        output (Ray forwards actor output to the driver late or not at all once the job ends:
        the driver prints them)."""
        from distrl import entry
        from distrl.errors import REPORTED, exit_status

        # torchrun's variables too, for a user's env class that reads them (the rank, say).
        os.environ.update(topology.torchrun_variables())
        try:
            if dry_run:
                return entry.dry_run(cfg, topology), "", ""
            status, summary = entry.run_training(cfg, topology, run_dir, remote_workers(cfg, workers))
            return status, "", summary
        except REPORTED as exc:
            return exit_status(exc), str(exc), ""


def remote_workers(cfg: RunConfig, spec: dict[str, Any]) -> RemoteWorkers:
    """A learner's worker actors (``ray.workers.workers_spec``), each group wrapped in what its
    runner or loop calls it through (``WorkerGroup.calls``); and where the learner publishes its
    usage."""
    import ray

    from distrl.runners.base import RemoteWorkers

    namespace, retries = spec["namespace"], spec["retries"]
    declared = run_groups(cfg)
    groups = {
        group: load(declared[group].calls)(
            declared[group], [ray.get_actor(name, namespace=namespace) for name in names], retries
        )
        for group, names in spec["groups"].items()
    }
    return RemoteWorkers(groups, status=LearnerStatus(namespace))


def start_learners(ray: Any, cluster: VirtualCluster, cfg: RunConfig, namespace: str, name: str) -> list[Any]:
    """The learners, named ``<name>-<rank>`` (``distrl status`` finds them by name)."""
    actor = ray.remote(Learner)
    workers = cfg.workers
    return [
        actor.options(
            name=f"{name}-{i}",
            namespace=namespace,
            num_cpus=workers.cpus_per_policy,
            num_gpus=workers.gpus_per_policy,
            scheduling_strategy=cluster.scheduling("policy", i),
        ).remote(cfg)
        for i in range(workers.policy)
    ]


def learner_topology(
    rank: int, world_size: int, node: tuple[int, int], master: tuple[str, int], attempt: int
) -> Topology:
    """Learner ``rank``'s place in the group, as a torchrun rank of restart ``attempt`` on
    ``node`` (its rank, and the learners on it). Ray gives each actor only its own GPUs, so every
    learner is local rank 0 of its own view."""
    node_rank, learners_on_node = node
    return Topology(
        launcher="ray",
        rank=rank,
        local_rank=0,
        world_size=world_size,
        local_world_size=learners_on_node,
        node_rank=node_rank,
        master_addr=master[0],
        master_port=master[1],
        restart_count=attempt,
    )


def ready(ray: Any, refs: Any, timeout_s: float, run_dir: Path) -> Any:
    """``ray.get(refs)`` of actors just started: one line, not a hang or a traceback, when one
    cannot start (its constructor or an import failed on its node, or no node has room); the
    remote traceback goes to the run dir's errors log."""
    from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError

    try:
        return ray.get(refs, timeout=timeout_s)
    except GetTimeoutError:
        raise UserError(
            f"the job's actors did not start within cluster.placement_timeout_s={timeout_s:g} "
            "(see `ray status` and `ray logs`); a larger cluster.placement_timeout_s gives them longer",
            code="ray-placement-timeout",
        ) from None
    except (RayActorError, RayTaskError) as exc:
        log = record_error(run_dir, "an actor of the job could not start", exc)
        raise UserError(
            f"an actor of the job could not start: {failure_cause(exc)} (traceback in {log})",
            code="ray-actor-start-failed",
        ) from None


def _wait(
    ray: Any,
    runs: list[Any],
    processes: list[ActorProcess | None],
    every_s: float,
    meanwhile: Callable[[], None],
    run_dir: Path,
    preemption: PreemptionFlag,
    training: Callable[[], bool],
) -> tuple[int, int | None]:
    """(the first non-zero exit status, else 0; the rank of a learner that died, which ends the
    wait at once, else None), calling ``meanwhile`` every ``every_s`` while none ends. Once a
    learner has failed the others get ``STOP_GRACE_S`` to end by themselves (a preempted group
    ends together) before the wait gives up on them; and once more when they have ended, so a
    job shorter than ``every_s`` is sampled too. A preemption signal to the driver goes on to
    every learner (``_preempt``) once all are ``training``. A learner's error and a death's cause
    are one line each; a learner that raised has its traceback in the run dir's errors log."""
    from ray.exceptions import RayActorError, RayTaskError

    pending, status, stop_by = list(runs), 0, math.inf
    next_sample, passed_on = time.monotonic() + every_s, False
    while pending and time.monotonic() < stop_by:
        if preemption.raised and not passed_on and training():
            passed_on = True
            _preempt(ray, processes, preemption.signal_name)
        wait_s = min(max(next_sample - time.monotonic(), 0.0), STOP_GRACE_S, PREEMPTION_CHECK_S)
        done, pending = ray.wait(pending, num_returns=1, timeout=wait_s)
        if not done:
            if time.monotonic() >= next_sample:
                meanwhile()
                next_sample = time.monotonic() + every_s
            continue
        rank = runs.index(done[0])
        try:
            code, error, summary = ray.get(done[0])
        except RayActorError as exc:
            cause = failure_cause(exc, processes[rank])
            print(f"distrl: learner {rank} (a policy worker) died: {cause}", file=sys.stderr, flush=True)
            return 1, rank
        except RayTaskError as exc:
            log = record_error(run_dir, f"learner {rank} raised", exc)
            code, error, summary = 1, f"{failure_cause(exc)} (traceback in {log})", ""
        if summary:
            print(summary, flush=True)
        for line in error.splitlines():
            print(f"distrl: error: learner {rank}: {line}", file=sys.stderr)
        if code and not status:
            status, stop_by = code, time.monotonic() + STOP_GRACE_S
    meanwhile()
    return status, None


def _preempt(ray: Any, processes: list[ActorProcess | None], signal_name: str | None) -> None:
    """SIGTERM to every learner's process, from a task on its own node: each stops as a preempted
    torchrun rank does, once the group agrees, with a checkpoint, and the job exits 75."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    print(
        f"distrl: {signal_name}: the learners stop after their update, with a checkpoint "
        "(exit 75; --resume goes on from it)",
        file=sys.stderr,
        flush=True,
    )
    send = ray.remote(num_cpus=0)(_terminate)
    for process in processes:
        if process is not None:  # a learner not yet placed has nothing to stop
            where = NodeAffinitySchedulingStrategy(process.node_id, soft=False)
            send.options(scheduling_strategy=where).remote(process.pid)


def _all_training(namespace: str, names: list[str]) -> bool:
    """Whether the learners ``names`` have all published their status, which each does from its
    training loop, its own preemption handler installed (a SIGTERM any sooner would end the
    process, not the run)."""
    from ray.experimental.internal_kv import _internal_kv_exists

    return all(_internal_kv_exists(LEARNER_KEY + name, namespace=namespace) for name in names)


def _terminate(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
