"""Ray mode's virtual cluster: one placement group per node of ``cluster.num_nodes``.

Each group holds one bundle per worker of that node, learners first and then the run's worker
groups beside them (env, eval and data workers, or its algorithm's own: ``ray.groups``), each
group's total split evenly over the nodes in order (``workers.<group>_per_node`` on every node when
given that way). A node's group is STRICT_PACK: its workers share one Ray node,
its object store and memory. ``cluster.strategy: SPREAD`` puts every node's group on a Ray node
of its own (each is placed in turn, kept off the Ray nodes the earlier ones took); ``PACK`` lets
Ray put several on one Ray node where they fit. A group not placed within
``cluster.placement_timeout_s`` is one line naming the node, what it asked for and what Ray has
free, never a hang.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from distrl.config.sections import ClusterConfig, WorkersSection, group_keys
from distrl.errors import UserError
from distrl.sharding import even_split

NODE_ID_LABEL = "ray.io/node-id"
"""The label Ray gives every node: its ID."""


@dataclass(frozen=True)
class VirtualCluster:
    groups: list[Any]
    """Each node's placement group (None for a node with no workers)."""
    slots: dict[str, list[tuple[int, int]]]
    """Per worker group (``policy``, then the run's groups beside it), each worker's (node, bundle)."""

    def scheduling(self, group: str, index: int) -> Any:
        """Where worker ``index`` of ``group`` runs: its bundle of its node's placement group."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        node, bundle = self.slots[group][index]
        return PlacementGroupSchedulingStrategy(self.groups[node], placement_group_bundle_index=bundle)


def worker_groups(workers: WorkersSection) -> dict[str, tuple[int, float]]:
    """The worker groups beside the learners: (workers, CPUs per worker), in bundle order."""
    keys = {group: group_keys(group) for group in workers.group_names()}
    return {
        group: (getattr(workers, total), getattr(workers, cpus)) for group, (total, _, cpus) in keys.items()
    }


def job_bundles(workers: WorkersSection) -> dict[str, tuple[int, dict[str, float]]]:
    """Per worker group, learners first: (workers in all, one worker's bundle)."""
    learner = {"CPU": workers.cpus_per_policy}
    if workers.gpus_per_policy:
        learner["GPU"] = workers.gpus_per_policy
    return {"policy": (workers.policy, learner)} | {
        group: (count, {"CPU": cpus}) for group, (count, cpus) in worker_groups(workers).items()
    }


def node_bundles(
    num_nodes: int, groups: dict[str, tuple[int, dict[str, float]]]
) -> tuple[list[list[dict[str, float]]], dict[str, list[tuple[int, int]]]]:
    """Every node's bundles and every worker's (node, bundle), from each group's (workers in all,
    resources per worker), in bundle order."""
    bundles: list[list[dict[str, float]]] = [[] for _ in range(num_nodes)]
    slots: dict[str, list[tuple[int, int]]] = {}
    for group, (count, resources) in groups.items():
        slots[group] = []
        for node in range(num_nodes):
            for _ in range(even_split(count, node, num_nodes)[1]):
                slots[group].append((node, len(bundles[node])))
                bundles[node].append(resources)
    return bundles, slots


def place(ray: Any, cluster: ClusterConfig, workers: WorkersSection, job: str) -> VirtualCluster:
    """The job's placement groups, placed one after the other. SPREAD places greedily: on
    uneven Ray nodes an early node may take a Ray node a later, larger one needed."""
    from ray.exceptions import GetTimeoutError
    from ray.util.placement_group import placement_group, placement_group_table, remove_placement_group

    bundles, slots = node_bundles(cluster.num_nodes, job_bundles(workers))
    placed: list[Any] = []
    taken: list[str] = []
    deadline = time.monotonic() + cluster.placement_timeout_s
    for node, mine in enumerate(bundles):
        if not mine:
            placed.append(None)
            continue
        selector = None
        spread = cluster.strategy == "SPREAD"
        if spread and taken:
            selector = [{NODE_ID_LABEL: f"!in({','.join(taken)})"}] * len(mine)
        group = placement_group(
            mine, strategy="STRICT_PACK", name=f"{job}-node-{node}", bundle_label_selector=selector
        )
        placed.append(group)
        try:
            ray.get(group.ready(), timeout=max(deadline - time.monotonic(), 0.0))
        except GetTimeoutError:
            for each in filter(None, placed):
                remove_placement_group(each)
            groups = [group for group, where in slots.items() if any(n == node for n, _ in where)]
            raise UserError(
                _not_placed(ray, cluster, node, mine, len(taken), groups), code="ray-node-unplaceable"
            ) from None
        if spread:
            taken.append(placement_group_table(group)["bundles_to_node_id"][0])
    return VirtualCluster(placed, slots)


def alive_nodes(ray: Any) -> list[dict[str, Any]]:
    return [node for node in ray.nodes() if node.get("Alive")]


def needs(bundles: list[dict[str, float]]) -> dict[str, float]:
    """The CPUs and GPUs a node's bundles ask for."""
    return {resource: sum(bundle.get(resource, 0.0) for bundle in bundles) for resource in ("CPU", "GPU")}


def _not_placed(
    ray: Any,
    cluster: ClusterConfig,
    node: int,
    bundles: list[dict[str, float]],
    others: int,
    groups: list[str],
) -> str:
    """The refusal of node ``node``, whose ``bundles`` hold workers of ``groups``: what it asked
    for, what is free, and how to ask for less."""
    need = needs(bundles)
    available = ray.available_resources()
    apart = f", on a Ray node apart from the {others} the job's other nodes took" if others else ""
    spread = f" (cluster.strategy={cluster.strategy}{apart})" if cluster.num_nodes > 1 else ""
    lacking = [r for r in need if need[r] > available.get(r, 0.0)]
    short = [f"{need[r] - available.get(r, 0.0):g} {r}" for r in lacking]
    missing = f"; missing: {' and '.join(short)}" if short else ""
    # Free enough in all yet not on one Ray node: either resource the node asks for may be the one.
    lacking = lacking or [r for r in need if need[r]]
    shares = [f"workers.cpus_per_{group}" for group in groups] if "CPU" in lacking else []
    if "GPU" in lacking and "policy" in groups:
        shares.append("workers.gpus_per_policy")
    fewer = " or ".join(f"workers.{group}" for group in groups)
    return (
        f"node {node} of cluster.num_nodes={cluster.num_nodes} (its {len(bundles)} worker(s) need "
        f"{need['CPU']:g} CPU, {need['GPU']:g} GPU on one Ray node{spread}) was not placed within "
        f"cluster.placement_timeout_s={cluster.placement_timeout_s:g}: free now in the Ray cluster: "
        f"{available.get('CPU', 0):g} CPU, {available.get('GPU', 0):g} GPU "
        f"on {len(alive_nodes(ray))} node(s){missing} (see `ray status`): wait for other jobs to free "
        f"them (a longer cluster.placement_timeout_s) or ask for less: fewer {fewer}"
        + (f", or a smaller {' or '.join(shares)}" if shares else "")
    )
