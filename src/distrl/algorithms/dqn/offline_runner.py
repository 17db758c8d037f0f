"""Offline DQN's runner: double DQN from logged transitions (ReAgent's setting), streamed by
``runners.logged``, with counterfactual evaluation of the greedy policy on rank 0's first logged
episodes every ``eval.cpe_every`` iterations where the data allow it."""

from __future__ import annotations

import sys
from pathlib import Path

from distrl.algorithms.dqn.runner import QLearningRunner
from distrl.errors import UserError
from distrl.ope.dqn import OfflineEvaluator, cpe_steps
from distrl.ope.estimators import Bootstrap
from distrl.runners.base import RunContext
from distrl.runners.logged import LoggedDataRunner


class OfflineRunner(LoggedDataRunner, QLearningRunner):
    def __init__(self, ctx: RunContext) -> None:
        observation_space, action_space = self.open_logged_data(ctx)
        if self.dataset.continuous:
            raise UserError(
                f"--data {ctx.cfg.data.path}: its actions are continuous ({action_space}); dqn needs "
                "discrete actions: algo.name=iql learns from continuous ones",
                code="algo-dqn-continuous-data",
            )
        QLearningRunner.__init__(self, ctx, observation_space, action_space)
        self.start_stream(ctx)
        self.iterations = 0
        self.evaluator = self._offline_evaluator() if ctx.comm.is_main and ctx.cfg.eval.cpe_every else None

    def _offline_evaluator(self) -> OfflineEvaluator | None:
        """Rank 0's counterfactual evaluator on the first episodes of its dataset, when the data
        allow one (logged propensities, discrete actions); read by a data worker if it has one."""
        cfg = self.cfg
        max_rows = cfg.eval.cpe_max_rows
        try:  # training itself may still go on (skipped rows, a tight cap)
            if self.data_workers is None:
                logged = cpe_steps(Path(cfg.data.path), cfg.data.on_bad_row, max_rows)
            else:
                logged = self.data_workers.cpe_steps(max_rows)
        except UserError as exc:
            print(
                f"distrl: no counterfactual evaluation during training: {exc} (eval.cpe_every=0 hides this)",
                file=sys.stderr,
            )
            return None
        return OfflineEvaluator(logged, cfg.algo.gamma, Bootstrap(resamples=cfg.eval.cpe_bootstrap))

    def evaluate_offline(self) -> dict[str, float]:
        self.iterations += 1
        if self.evaluator is None or self.iterations % self.cfg.eval.cpe_every != 0:
            return {}
        with self.clock("eval"):
            return self.evaluator.metrics(self.q_network)  # rank 0's row is the one logged
