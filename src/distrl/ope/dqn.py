"""Counterfactual evaluation of a DQN's greedy policy on a logged dataset (``distrl
evaluate-offline``, and repeatedly from a training loop through ``OfflineEvaluator``), ReAgent's
way: the target policy puts probability 1 on the arg-max of the Q-network over the possible
actions; the one-step estimators (DM, DR) take a reward model fitted on the log as their model
(``reward_model``) and the sequential ones (SDR, WDR) the Q-network itself, a value model as
they need. DQN never normalises observations (its runner refuses to), so the network takes the
logged features as they are, exactly as in training.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq
import torch
from torch import nn

from distrl.data.logged import LoggedDataset, Rows, Unit
from distrl.errors import UserError
from distrl.ope.estimators import DEFAULT_BOOTSTRAP, Bootstrap, EvaluationSteps, cpe_metrics
from distrl.ope.reward_model import fit_reward_model

_ROWS_PER_FORWARD = 65_536
"""Rows per network call: bounds the memory a large dataset takes on the device."""


@dataclass(frozen=True)
class LoggedSteps:
    """Logged rows: the decoded ``Rows`` plus the columns episodes and the target policy's action
    mask need, which ``Rows`` leaves out."""

    rows: Rows
    mdp_id: np.ndarray
    sequence_number: np.ndarray
    possible_actions: np.ndarray
    """[rows, actions] mask of the actions the logger could take."""

    def take(self, keep: np.ndarray) -> LoggedSteps:
        return LoggedSteps(self.rows.take(keep), *(getattr(self, name)[keep] for name in _PER_ROW_COLUMNS))

    @staticmethod
    def concat(parts: list[LoggedSteps]) -> LoggedSteps:
        return LoggedSteps(
            Rows.concat([part.rows for part in parts]),
            *(np.concatenate([getattr(part, name) for part in parts]) for name in _PER_ROW_COLUMNS),
        )


_PER_ROW_COLUMNS = ("mdp_id", "sequence_number", "possible_actions")
"""What ``LoggedSteps`` reads besides ``Rows``, in its fields' order."""


def read_logged_steps(dataset: LoggedDataset, max_rows: int | None = None) -> LoggedSteps:
    """``dataset``'s rows (validated as for training), row group after row group in file order.
    With ``max_rows``, only the first whole episodes (by their first row) whose rows add up to at
    most ``max_rows``: reading stops once more than ``max_rows`` rows are in and a whole row group
    has gone by without a row of those episodes, so they have ended (logs of several envs
    interleave their episodes)."""
    parts: list[LoggedSteps] = []
    rows_read = 0
    for unit in dataset.row_groups:
        parts.append(_read_unit(dataset, unit))
        rows_read += len(parts[-1].mdp_id)
        if max_rows is not None and rows_read > max_rows:
            mdp_id = np.concatenate([part.mdp_id for part in parts])
            if not np.isin(parts[-1].mdp_id, mdp_id[_first_episodes(mdp_id, max_rows)]).any():
                break
    logged = LoggedSteps.concat(parts)
    return logged if max_rows is None else logged.take(_first_episodes(logged.mdp_id, max_rows))


def cpe_steps(path: Path, on_bad_row: str, max_rows: int) -> LoggedSteps:
    """The logged steps counterfactual evaluation during training estimates from: the dataset's
    first whole episodes up to ``max_rows`` rows, read apart from training's reads (they must
    not count in its skipped rows); a UserError saying why there are none."""
    from distrl.data.reader import open_dataset

    dataset = open_dataset(path, on_bad_row)
    if not isinstance(dataset, LoggedDataset) or dataset.parametric:
        raise UserError("it needs ReAgent-format data with discrete actions", code="ope-data-not-discrete")
    logged = read_logged_steps(dataset, max_rows)
    if np.isnan(logged.rows.propensity).all():
        raise UserError("the log has no propensities (a deterministic logger)", code="ope-no-propensities")
    return logged


def _read_unit(dataset: LoggedDataset, unit: Unit) -> LoggedSteps:
    rows = dataset.read(unit)
    table = pq.ParquetFile(unit.path).read_row_group(unit.row_group, list(_PER_ROW_COLUMNS))
    if len(table) != len(rows):  # rows dropped by data.on_bad_row=skip would tear episodes
        raise UserError(
            f"{unit.path}: {len(table) - len(rows)} malformed row(s) were skipped; counterfactual "
            "evaluation needs whole episodes (fix or remove those rows)",
            code="ope-malformed-rows",
        )
    flat_mask = pc.list_flatten(table.column("possible_actions")).to_numpy(zero_copy_only=False)
    return LoggedSteps(
        rows,
        table.column("mdp_id").to_numpy(zero_copy_only=False).astype(str),
        table.column("sequence_number").to_numpy(zero_copy_only=False).astype(np.int64),
        flat_mask.astype(bool).reshape(len(table), dataset.num_actions),
    )


def _first_episodes(mdp_id: np.ndarray, max_rows: int) -> np.ndarray:
    """Indices of the rows of the first episodes (by their first row) while those add up to at
    most ``max_rows`` rows."""
    _, first_row, episode, lengths = np.unique(
        mdp_id, return_index=True, return_inverse=True, return_counts=True
    )
    in_order = np.argsort(first_row)
    rows_so_far = np.cumsum(lengths[in_order])
    if rows_so_far[0] > max_rows:
        raise UserError(
            f"max rows {max_rows}: fewer than the first episode's {rows_so_far[0]} rows; "
            f"allow at least {rows_so_far[0]}",
            code="ope-max-rows-too-few",
        )
    return np.flatnonzero(np.isin(episode, in_order[rows_so_far <= max_rows]))


class OfflineEvaluator:
    """CPE metrics of Q-networks' greedy policies on one logged dataset, cheap to repeat (every
    few iterations of a training loop): the reward model depends on the data alone, so it is
    fitted once, at the first call, and each call then only runs the Q-network over the rows and
    the estimators."""

    def __init__(self, logged: LoggedSteps, gamma: float, bootstrap: Bootstrap = DEFAULT_BOOTSTRAP) -> None:
        self.logged = logged
        self.gamma = gamma
        self.bootstrap = bootstrap

    @classmethod
    def from_dataset(
        cls,
        dataset: LoggedDataset,
        gamma: float,
        bootstrap: Bootstrap = DEFAULT_BOOTSTRAP,
        max_rows: int | None = None,
    ) -> OfflineEvaluator:
        """An evaluator on ``dataset``'s rows, or on its first whole episodes up to ``max_rows``
        rows (reading no further than needed): a bounded sample of a huge dataset."""
        return cls(read_logged_steps(dataset, max_rows), gamma, bootstrap)

    @cached_property
    def predicted_rewards(self) -> np.ndarray:
        """[rows, actions] r-hat(x, a) of every row, from the reward model fitted on the rows."""
        rows = self.logged.rows
        reward_model = fit_reward_model(
            rows.obs, rows.actions, rows.rewards, self.logged.possible_actions.shape[1]
        )
        return _forward_in_chunks(reward_model, rows.obs)

    def evaluation_steps(self, q_network: nn.Module) -> EvaluationSteps:
        """The greedy policy of ``q_network`` as the target, the reward model as the one-step
        estimators' model and the Q-values as the sequential ones', for every row."""
        q_values = _forward_in_chunks(q_network, self.logged.rows.obs)
        greedy = np.where(self.logged.possible_actions, q_values, -np.inf).argmax(axis=1)
        row = np.arange(len(self.logged.rows))
        actions = self.logged.rows.actions
        return EvaluationSteps(
            mdp_id=self.logged.mdp_id,
            sequence_number=self.logged.sequence_number,
            rewards=self.logged.rows.rewards.astype(np.float64),
            logging_propensity=self.logged.rows.propensity,
            target_probability=(actions == greedy).astype(np.float64),
            reward_model_logged=self.predicted_rewards[row, actions],
            reward_model_target=self.predicted_rewards[row, greedy],
            value_model_logged=q_values[row, actions],
            value_model_target=q_values[row, greedy],
        )

    def metrics(self, q_network: nn.Module) -> dict[str, float]:
        """CPE metrics (``cpe/ips``, ``cpe/wdr_ci_low``, ...) of ``q_network``'s greedy policy;
        the network may sit on any device."""
        return cpe_metrics(self.evaluation_steps(q_network), self.gamma, self.bootstrap)


@torch.no_grad()
def _forward_in_chunks(network: nn.Module, obs: np.ndarray) -> np.ndarray:
    """``network``'s [rows, actions] outputs for every row of ``obs``, as float64 on the CPU."""
    device = next(network.parameters()).device
    chunks = [
        network(torch.as_tensor(obs[start : start + _ROWS_PER_FORWARD], device=device)).double().cpu().numpy()
        for start in range(0, len(obs), _ROWS_PER_FORWARD)
    ]
    return np.concatenate(chunks)
