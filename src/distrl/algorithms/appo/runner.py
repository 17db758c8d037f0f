"""APPO's runner: PPO's collection and loop (``OnPolicyRunner``) with APPO's update, which makes
its own V-trace batch (``APPO.training_batch``); its target network is checkpointed with the
policy."""

from __future__ import annotations

import dataclasses
from typing import Any

from distrl.algorithms.appo.update import APPO
from distrl.io.train_state import ModuleTrainState, TrainState
from distrl.runners.on_policy import OnPolicyRunner


class APPORunner(OnPolicyRunner):
    algorithm = "appo"
    update_rule = APPO
    algo: APPO

    def train_state(self) -> TrainState:
        state = super().train_state()
        assert isinstance(state, ModuleTrainState)
        return dataclasses.replace(state, modules={**state.modules, "target_policy": self.algo.target})

    def rank_state(self) -> dict[str, Any]:
        return {"updates_done": self.algo.updates_done}

    def load_rank_state(self, state: dict[str, Any]) -> None:
        self.algo.updates_done = state.get("updates_done", 0)
