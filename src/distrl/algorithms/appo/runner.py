"""APPO's runner: PPO's collection and loop (``OnPolicyRunner``) with V-trace returns and APPO's
update; its target network is checkpointed with the policy."""

from __future__ import annotations

import dataclasses
from typing import Any

from distrl.algorithms.appo.update import APPO
from distrl.io.train_state import ModuleTrainState, TrainState
from distrl.runners.on_policy import OnPolicyRunner
from distrl.storage.rollout import RolloutBatch, RolloutSegment


class APPORunner(OnPolicyRunner):
    algorithm = "appo"
    update_rule = APPO
    algo: APPO

    def returns(self, rollout: RolloutSegment) -> RolloutBatch:
        return self.algo.vtrace_batch(rollout, self.sequence_length)

    def train_state(self) -> TrainState:
        state = super().train_state()
        assert isinstance(state, ModuleTrainState)
        return dataclasses.replace(state, modules={**state.modules, "target_policy": self.algo.target})

    def rank_state(self) -> dict[str, Any]:
        return {"updates_done": self.algo.updates_done}

    def load_rank_state(self, state: dict[str, Any]) -> None:
        self.algo.updates_done = state.get("updates_done", 0)
