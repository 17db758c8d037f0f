"""What every learner from logged transitions shares (offline DQN, IQL): data-parallel, each rank
streaming its own part of the dataset (``distrl.data.logged``) and never holding the whole of it;
every row is trained on exactly once per epoch over all ranks.

Ranks' parts may differ in size, yet every rank must take the same gradient steps: an epoch has
as many steps as the rank with the most rows needs at its share of the batch, and a rank whose
part is used up joins the remaining steps of the epoch with no samples (its gradient weighs
nothing in the sample-weighted average). ``data.layout`` says which ranks divide which copy of
the data (all ranks one dataset, or each node's ranks that node's part). The policy is evaluated
online on ``env.id`` for the stop check and ``distrl eval``. A resumed run continues its epoch
where the checkpoint left it (the same ranks and layout; otherwise the epoch starts over).

``iteration()`` reads as the algorithm: ``gradient_steps`` times, the next batch of this rank's
part -> one gradient step of the algorithm's update.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

from distrl.data.logged import LoggedDataset, Rows, ShuffledStream, node_shares, ranks_sharing_a_copy
from distrl.data.reader import open_dataset
from distrl.errors import UserError
from distrl.runners.base import DataWorkers, IterationResult, RunContext, Runner, scheduled_learning_rate
from distrl.runners.replay import ReplayUpdate, batch_share
from distrl.seeding import rank_seed, seed_torch
from distrl.storage.replay import TransitionBatch

if TYPE_CHECKING:
    from distrl.data.minari_dataset import MinariLoggedDataset


class LoggedDataRunner(Runner):
    """Subclasses call ``open_logged_data`` (the spaces the dataset's rows have), build ``algo``
    (a ``ReplayUpdate``), then call ``start_stream``."""

    algo: ReplayUpdate

    def open_logged_data(self, ctx: RunContext) -> tuple[gym.spaces.Box, gym.spaces.Space]:
        """Open ``data.path`` (read here, or by the rank's data workers); the observation and
        action spaces of its rows."""
        cfg = ctx.cfg
        if cfg.normalize.clip_rewards:
            raise UserError(
                "normalize.clip_rewards is for online training; logged rewards are learnt as logged: "
                "set normalize.clip_rewards=false",
                code="data-clip-rewards",
            )
        seed_torch(cfg.train.seed, ctx.comm.rank)
        self.data_workers: DataWorkers | None = ctx.workers.data
        path = Path(cfg.data.path)
        if self.data_workers is None:
            self.dataset = open_dataset(path, cfg.data.on_bad_row)
        else:
            self.dataset = self.data_workers.open(path, cfg.data.on_bad_row)
        if self.dataset.parametric and cfg.train.stop_return is not None:
            raise UserError(
                f"train.stop_return={cfg.train.stop_return} evaluates the policy in env {cfg.env.id!r}, but "
                f"{cfg.data.path} has parametric actions (candidate sets no env offers): "
                "set train.stop_return=null",
                code="data-parametric-stop-return",
            )
        obs_space = gym.spaces.Box(-np.inf, np.inf, (self.dataset.obs_dim,), dtype=np.float32)
        return obs_space, self.dataset.action_space()

    def start_stream(self, ctx: RunContext) -> None:
        """This rank's part of the dataset as a stream of its shares of the global batches."""
        cfg, comm = ctx.cfg, ctx.comm
        self.cfg, self.comm, self.clock, self.device = cfg, comm, ctx.clock, ctx.device
        self.batch_share = batch_share(cfg, comm.rank, comm.world_size)
        peers = self._ranks_sharing_my_copy(ctx.node_rank)
        seed, buffer_rows = rank_seed(cfg.train.seed, comm.rank), cfg.data.shuffle_buffer
        if self.data_workers is not None and cfg.data.layout == "split":
            # Each data worker reads the part on its own node, shared with every rank's workers there.
            mine = json.dumps(self.data_workers.nodes).encode()
            shares = node_shares([json.loads(b) for b in comm.all_gather_bytes(mine)], comm.rank)
            self.stream = self.data_workers.stream_node_parts(shares, buffer_rows, seed)
        else:
            units = self.dataset.shard(peers.index(comm.rank), len(peers))
            if self.data_workers is None:
                self.stream = ShuffledStream(self.dataset, units, buffer_rows, seed)
            else:
                self.stream = self.data_workers.stream(units, buffer_rows, seed)
        # Every rank learns every rank's batches per epoch, so all agree on the steps of an epoch.
        mine = self.stream.batches_per_epoch(self.batch_share)
        self.steps_per_epoch = int(
            max(json.loads(b) for b in comm.all_gather_bytes(json.dumps(mine).encode()))
        )
        self.epoch = 0
        self.step_in_epoch = 0
        self.batches: Iterator[Rows] = iter(())

    def _ranks_sharing_my_copy(self, node_rank: int) -> list[int]:
        """Check the nodes' data against ``data.layout`` (the same on every rank, so all fail
        together) and return the ranks that divide this rank's copy."""
        layout = self.cfg.data.layout
        mine = {
            "node": node_rank,
            "path": self.cfg.data.path,
            "files": self.dataset.summary(),
            "rows": _row_shape(self.dataset),
        }
        ranks = [json.loads(b) for b in self.comm.all_gather_bytes(json.dumps(mine).encode())]
        first = ranks[0]
        for theirs in ranks:
            if theirs["rows"] != first["rows"]:
                raise UserError(
                    f"data.path: node {theirs['node']}'s rows ({theirs['path']}) have {theirs['rows']}, "
                    f"node {first['node']}'s ({first['path']}) {first['rows']}",
                    code="data-nodes-rows-differ",
                )
            if layout == "copy" and theirs["files"] != first["files"]:
                raise UserError(
                    f"data.layout=copy: node {theirs['node']}'s dataset ({theirs['path']}) differs from node "
                    f"{first['node']}'s ({first['path']}) in file names or row counts; if each node holds "
                    "its own part, use data.layout=split",
                    code="data-copy-layout-differs",
                )
        return ranks_sharing_a_copy(layout, [r["node"] for r in ranks], self.comm.rank)

    def evaluate_offline(self) -> dict[str, float]:
        """Estimates from the logged data alone, logged with the iteration's row (none by default)."""
        return {}

    # ----------------------------------------------------------------------------- the runner
    def start(self, fresh: bool) -> None:
        self.batches = self.stream.batches(self.batch_share, self.epoch)
        # A resumed run replays its epoch's order (seeded by rank and epoch) up to where it was.
        for _ in range(self.step_in_epoch):
            next(self.batches, None)

    def rank_state(self) -> dict[str, Any]:
        cursor = {
            "epoch": self.epoch,
            "step_in_epoch": self.step_in_epoch,
            "world_size": self.comm.world_size,
            "layout": self.cfg.data.layout,
        }
        return {**super().rank_state(), **cursor}

    def load_rank_state(self, state: dict[str, Any]) -> None:
        super().load_rank_state(state)
        self.epoch = state.get("epoch", 0)
        # The same parts only on the same ranks and layout; otherwise the epoch starts over.
        if (
            state.get("world_size") == self.comm.world_size
            and state.get("layout", "copy") == self.cfg.data.layout
        ):
            self.step_in_epoch = state.get("step_in_epoch", 0)

    def iteration(self, global_step: int) -> IterationResult:
        lr = scheduled_learning_rate(self.cfg, global_step)
        self.algo.set_learning_rate(lr)
        totals: dict[str, float] = {}
        samples = steps_with_data = 0
        # An iteration that may reach the step budget counts every step's samples over all ranks
        # and ends there: a run ends within one global batch of train.total_steps.
        left = self.cfg.train.total_steps - global_step
        may_finish = left <= self.cfg.algo.gradient_steps * self.cfg.algo.batch_size
        for _ in range(self.cfg.algo.gradient_steps):
            if self.step_in_epoch == self.steps_per_epoch:
                self.epoch += 1
                self.step_in_epoch = 0
                self.batches = self.stream.batches(self.batch_share, self.epoch)
            with self.clock("data"):
                batch = self._to_batch(next(self.batches, None))
            stats = self.algo.gradient_step(batch)
            self.step_in_epoch += 1
            samples += len(batch)
            if len(batch):
                steps_with_data += 1
                for key, value in stats.items():
                    totals[key] = totals.get(key, 0.0) + value
            if may_finish:
                left -= int(self.comm.sum_scalars([len(batch)])[0])
                if left <= 0:
                    break
        skipped = totals.pop("skipped_steps", 0.0)
        estimates = self.evaluate_offline()
        # Each statistic's mean over all ranks' steps that had samples, in the same sum as the counts.
        names = self._statistic_names(totals)
        global_samples, skipped_rows, global_steps_with_data, *sums = self.comm.sum_scalars(
            [samples, self.dataset.skipped_rows, steps_with_data, *(totals.get(name, 0.0) for name in names)]
        )
        counted = {} if self.data_workers is None else self.data_workers.counts()
        return IterationResult(
            env_steps=int(global_samples),
            local_steps=samples,
            averaged={
                name: total / max(global_steps_with_data, 1) for name, total in zip(names, sums, strict=True)
            },
            counted=counted,
            replicated={
                "learning_rate": lr,
                "epoch": self.epoch,
                "skipped_rows": skipped_rows,
                **estimates,
            },
            skipped=skipped > 0,
        )

    def _statistic_names(self, totals: dict[str, float]) -> list[str]:
        """The names of the algorithm's statistics over all ranks: a rank whose part ran out for
        the whole iteration has no statistics of its own, not even their names."""
        gathered = self.comm.all_gather_bytes(json.dumps(sorted(totals)).encode())
        return sorted(set().union(*(json.loads(payload) for payload in gathered)))

    def close(self) -> None:
        """Nothing to release: files are opened per read."""

    def _to_batch(self, rows: Rows | None) -> TransitionBatch:
        if rows is None:  # this rank's part is used up for the epoch
            rows = self.dataset.empty_rows()
        device = self.device

        def tensor(values: np.ndarray | None, dtype: torch.dtype | None = None) -> torch.Tensor | None:
            return None if values is None else torch.as_tensor(values, dtype=dtype, device=device)

        return TransitionBatch(
            obs=tensor(rows.obs, torch.float32),
            actions=tensor(rows.actions),
            returns=tensor(rows.rewards, torch.float32),
            next_obs=tensor(rows.next_obs, torch.float32),
            terminated=tensor(rows.terminal),
            steps=torch.ones(len(rows), dtype=torch.int64, device=device),
            next_action_mask=tensor(rows.next_action_mask),
            candidates=tensor(rows.candidates),
            candidate_mask=tensor(rows.candidate_mask),
            next_candidates=tensor(rows.next_candidates),
        )


def _row_shape(dataset: LoggedDataset | MinariLoggedDataset) -> str:
    """What every node's rows must agree on, in words."""
    if dataset.action_dim is not None:
        return f"{dataset.obs_dim} features and candidates of {dataset.action_dim} features"
    if dataset.action_bounds is not None:
        low, high = dataset.action_bounds
        return f"{dataset.obs_dim} features and actions bounded by {low} and {high}"
    return f"{dataset.obs_dim} features and {dataset.num_actions} actions"
