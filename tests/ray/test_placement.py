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
    """Ray mode's groups are declared once (``ray.groups``, an algorithm's registry entry); each
    algorithm's config sizes its own, and each of those resolves to an actor and what a learner
    calls it through."""
    from distrl.algos.registry import ALGORITHMS, load
    from distrl.config.run import load_config
    from distrl.config.sections import GENERIC_WORKER_GROUPS, WorkersConfig, group_keys
    from distrl.ray.groups import WORKER_GROUPS, run_groups

    assert WorkersConfig.group_names() == list(WORKER_GROUPS) == list(GENERIC_WORKER_GROUPS)
    for name in ALGORITHMS:
        cfg = load_config(None, [f"algo.name={name}"])
        for group, declared in run_groups(cfg).items():
            assert declared.name == group and set(group_keys(group)) <= set(type(cfg.workers).model_fields)
            assert isinstance(load(declared.actor), type) and isinstance(load(declared.calls), type)
    grpo = run_groups(load_config(None, ["algo.name=grpo"]))
    # Each in the place of the group it replaces; its own generation workers after them.
    assert list(grpo) == ["verifier", "eval", "prompt", "generation"]
    assert grpo["eval"] is WORKER_GROUPS["eval"]
    assert (grpo["verifier"].failures_metric, grpo["prompt"].failures_metric) == (
        "verifier_worker_failures",
        "prompt_worker_failures",
    )
