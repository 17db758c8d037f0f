"""``distrl evaluate-offline``: a DQN checkpoint's greedy policy valued on a logged dataset, and
the report as a table or one line of JSON. Apart from ``ope.dqn`` because it reads checkpoints
back through the algorithm registry, which the training runners (users of ``ope.dqn``) sit under."""

from __future__ import annotations

import json
import math
from pathlib import Path

from rich.console import Console
from rich.table import Table

from distrl.data.logged import LoggedDataset
from distrl.errors import UserError
from distrl.eval.policy import load_policy
from distrl.io.metrics import json_number
from distrl.models.q_network import GreedyPolicy
from distrl.ope.dqn import OfflineEvaluator
from distrl.ope.estimators import ESTIMATORS, Bootstrap


def evaluate_checkpoint_offline(
    checkpoint: Path, data: Path, bootstrap: Bootstrap, max_rows: int | None = None
) -> dict[str, float | str]:
    """``distrl evaluate-offline``: a DQN checkpoint's greedy policy valued on the dataset at
    ``data`` (or its first whole episodes up to ``max_rows`` rows) with the checkpoint's
    discount; what the checkpoint is, then the metrics."""
    loaded = load_policy(checkpoint)
    if not isinstance(loaded.policy, GreedyPolicy):
        raise UserError(
            f"checkpoint {loaded.checkpoint} holds a {type(loaded.policy).__name__} ({loaded.algorithm}); "
            "counterfactual evaluation needs a discrete-action Q-network (algo.name=dqn on discrete actions)",
            code="ope-checkpoint-not-dqn",
        )
    q_network = loaded.policy.q_network
    dataset = LoggedDataset(data)
    obs_dim = loaded.observation_space.shape[0]
    if (dataset.obs_dim, dataset.num_actions) != (obs_dim, q_network.num_actions):
        raise UserError(
            f"--data {data}: {dataset.obs_dim} observation features and {dataset.num_actions} actions, "
            f"but checkpoint {loaded.checkpoint} was trained on {obs_dim} and {q_network.num_actions}; "
            "evaluate it on data logged in the env it was trained in",
            code="ope-data-mismatch",
        )
    evaluator = OfflineEvaluator.from_dataset(dataset, loaded.cfg.algo.gamma, bootstrap, max_rows)
    return {
        "checkpoint": str(loaded.checkpoint),
        "global_step": loaded.global_step,
        **evaluator.metrics(q_network),
    }


def report_json(report: dict[str, float | str]) -> str:
    """The report as one line of strict JSON: a non-finite number (a normalised value when the
    logger's value is 0) is null, since NaN and Infinity are not JSON."""
    return json.dumps({key: json_number(value) for key, value in report.items()}, allow_nan=False)


def print_report(report: dict[str, float | str], confidence: float) -> None:
    """The estimates as a table, one estimator a line; "n/a" for a non-finite number."""
    table = Table(
        title=f"counterfactual value of {report['checkpoint']} "
        f"({report['cpe/rows']:.0f} rows, {report['cpe/episodes']:.0f} episodes)"
    )
    for column in ("estimator", "estimate", f"{confidence:.0%} CI", "normalized"):
        table.add_column(column, justify="left" if column == "estimator" else "right")
    for name in ESTIMATORS:
        parts = ("", "_ci_low", "_ci_high", "_normalized")
        estimate, low, high, normalized = (_shown(report[f"cpe/{name}{part}"]) for part in parts)
        table.add_row(name.upper(), estimate, f"[{low}, {high}]", normalized)
    console = Console()
    console.print(table)
    without = report["cpe/rows_without_propensity"]
    if without:
        console.print(
            f"{without:.0f} rows ({report['cpe/episodes_without_propensity']:.0f} episodes) have no "
            "propensity (deterministic logger) and are left out of IPS, DR, SDR and WDR"
        )


def _shown(value: float) -> str:
    return f"{value:.4g}" if math.isfinite(value) else "n/a"
