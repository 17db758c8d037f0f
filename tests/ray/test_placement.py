"""Ray mode's virtual cluster: each group's workers split over the nodes, learners first."""

from __future__ import annotations

from distrl.ray.placement import node_bundles

LEARNER = {"CPU": 1.0, "GPU": 1.0}
ENV = {"CPU": 0.25}


def test_each_group_is_split_evenly_over_the_nodes_in_order() -> None:
    bundles, slots = node_bundles(
        2, {"policy": (2, LEARNER), "env": (3, ENV), "eval": (1, ENV), "data": (0, ENV)}
    )
    assert bundles == [[LEARNER, ENV, ENV, ENV], [LEARNER, ENV]]
    assert slots == {
        "policy": [(0, 0), (1, 0)],
        "env": [(0, 1), (0, 2), (1, 1)],  # learner 0's env workers on its node
        "eval": [(0, 3)],
        "data": [],
    }


def test_a_node_without_workers_has_no_bundles() -> None:
    bundles, slots = node_bundles(3, {"policy": (1, LEARNER), "env": (2, ENV)})
    assert bundles == [[LEARNER, ENV], [ENV], []]
    assert slots == {"policy": [(0, 0)], "env": [(0, 1), (1, 0)]}


def test_every_worker_group_has_its_config_keys_and_every_config_group_its_actor() -> None:
    """Ray mode's groups are declared once (``ray.groups``); the config sizes each of them."""
    from distrl.config.sections import WorkersConfig
    from distrl.ray.groups import WORKER_GROUPS

    assert WorkersConfig.groups() == ["policy", *WORKER_GROUPS]
    for group in WORKER_GROUPS:
        assert {group, f"{group}_per_node", f"cpus_per_{group}"} <= set(WorkersConfig.model_fields)
