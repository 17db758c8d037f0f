"""Counterfactual evaluation of a DQN's greedy policy on a logged dataset (``distrl
evaluate-offline``), ReAgent's way: the target policy puts probability 1 on the arg-max of the
Q-network over the possible actions, and the Q-network itself is the model (q-hat) of DM, DR,
SDR and WDR. DQN never normalises observations (its runner refuses to), so the network takes the
logged features as they are, exactly as in training.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch
from rich.console import Console
from rich.table import Table
from torch import nn

from distrl.data.logged import LoggedDataset, Rows
from distrl.errors import UserError
from distrl.evaluate import load_policy
from distrl.models.q_network import GreedyPolicy
from distrl.ope.estimators import DEFAULT_BOOTSTRAP, ESTIMATORS, Bootstrap, EvaluationSteps, cpe_metrics

_ROWS_PER_FORWARD = 65_536
"""Rows per Q-network call: bounds the memory a large dataset takes on the device."""


@dataclass(frozen=True)
class LoggedSteps:
    """Every row of a dataset: the decoded ``Rows`` plus the columns episodes and the target
    policy's action mask need, which ``Rows`` leaves out."""

    rows: Rows
    mdp_id: np.ndarray
    sequence_number: np.ndarray
    possible_actions: np.ndarray
    """[rows, actions] mask of the actions the logger could take."""


def read_logged_steps(dataset: LoggedDataset) -> LoggedSteps:
    """All of ``dataset``'s rows (validated as for training), file after file."""
    parts: list[Rows] = []
    mdp_ids, sequence_numbers, possible_actions = [], [], []
    for unit in dataset.units(1):
        rows = dataset.read(unit)
        file = pq.ParquetFile(unit.path)
        columns = ["mdp_id", "sequence_number", "possible_actions"]
        table = file.read(columns) if unit.row_group is None else file.read_row_group(unit.row_group, columns)
        if len(table) != len(rows):  # rows dropped by data.on_bad_row=skip would tear episodes
            raise UserError(
                f"{unit.path}: {len(table) - len(rows)} malformed row(s) were skipped; counterfactual "
                "evaluation needs whole episodes (fix or remove those rows)"
            )
        parts.append(rows)
        mdp_ids.append(table.column("mdp_id").to_numpy(zero_copy_only=False).astype(str))
        sequence_numbers.append(table.column("sequence_number").to_numpy(zero_copy_only=False))
        flat_mask = pc.list_flatten(table.column("possible_actions")).to_numpy(zero_copy_only=False)
        possible_actions.append(flat_mask.astype(bool).reshape(len(table), dataset.num_actions))
    return LoggedSteps(
        Rows.concat(parts),
        np.concatenate(mdp_ids),
        np.concatenate(sequence_numbers).astype(np.int64),
        np.concatenate(possible_actions),
    )


@torch.no_grad()
def greedy_evaluation_steps(q_network: nn.Module, logged: LoggedSteps) -> EvaluationSteps:
    """The greedy policy of ``q_network`` as the target and its Q-values as q-hat, for every row."""
    device = next(q_network.parameters()).device
    chunks = []
    for start in range(0, len(logged.rows), _ROWS_PER_FORWARD):
        obs = torch.as_tensor(logged.rows.obs[start : start + _ROWS_PER_FORWARD], device=device)
        chunks.append(q_network(obs).double().cpu().numpy())
    q_values = np.concatenate(chunks)
    greedy = np.where(logged.possible_actions, q_values, -np.inf).argmax(axis=1)
    row = np.arange(len(logged.rows))
    actions = logged.rows.actions
    return EvaluationSteps(
        mdp_id=logged.mdp_id,
        sequence_number=logged.sequence_number,
        rewards=logged.rows.rewards.astype(np.float64),
        logging_propensity=logged.rows.propensity,
        target_probability=(actions == greedy).astype(np.float64),
        q_logged=q_values[row, actions],
        target_value=q_values[row, greedy],
    )


def q_network_cpe_metrics(
    q_network: nn.Module, logged: LoggedSteps, gamma: float, bootstrap: Bootstrap = DEFAULT_BOOTSTRAP
) -> dict[str, float]:
    """CPE metrics (``cpe/ips``, ``cpe/wdr_ci_low``, ...) of ``q_network``'s greedy policy on
    ``logged``; the network may sit on any device."""
    return cpe_metrics(greedy_evaluation_steps(q_network, logged), gamma, bootstrap)


def evaluate_checkpoint_offline(checkpoint: Path, data: Path, bootstrap: Bootstrap) -> dict[str, float | str]:
    """``distrl evaluate-offline``: a DQN checkpoint's greedy policy valued on the dataset at
    ``data`` with the checkpoint's discount; what the checkpoint is, then the metrics."""
    loaded = load_policy(checkpoint)
    if not isinstance(loaded.policy, GreedyPolicy):
        raise UserError(
            f"checkpoint {loaded.checkpoint} holds a {loaded.algorithm} policy; counterfactual "
            "evaluation needs a Q-network (algo.name=dqn)"
        )
    q_network = loaded.policy.q_network
    dataset = LoggedDataset(data)
    if (dataset.obs_dim, dataset.num_actions) != (loaded.obs_dim, q_network.num_actions):
        raise UserError(
            f"--data {data}: {dataset.obs_dim} observation features and {dataset.num_actions} actions, "
            f"but checkpoint {loaded.checkpoint} was trained on {loaded.obs_dim} and {q_network.num_actions}"
        )
    metrics = q_network_cpe_metrics(q_network, read_logged_steps(dataset), loaded.cfg.algo.gamma, bootstrap)
    return {"checkpoint": str(loaded.checkpoint), "global_step": loaded.global_step, **metrics}


def print_report(report: dict[str, float | str], confidence: float) -> None:
    """The estimates as a table, one estimator a line."""
    table = Table(
        title=f"counterfactual value of {report['checkpoint']} "
        f"({report['cpe/rows']:.0f} rows, {report['cpe/episodes']:.0f} episodes)"
    )
    for column in ("estimator", "estimate", f"{confidence:.0%} CI", "normalized"):
        table.add_column(column, justify="left" if column == "estimator" else "right")
    for name in ESTIMATORS:
        table.add_row(
            name.upper(),
            f"{report[f'cpe/{name}']:.4g}",
            f"[{report[f'cpe/{name}_ci_low']:.4g}, {report[f'cpe/{name}_ci_high']:.4g}]",
            f"{report[f'cpe/{name}_normalized']:.4g}",
        )
    console = Console()
    console.print(table)
    without = report["cpe/rows_without_propensity"]
    if without:
        console.print(
            f"{without:.0f} rows ({report['cpe/episodes_without_propensity']:.0f} episodes) have no "
            "propensity (deterministic logger) and are left out of IPS, DR, SDR and WDR"
        )
