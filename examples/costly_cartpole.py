"""A user's env whose every step costs CPU time, as a physics simulator's does: Gymnasium's
CartPole-v1 computing ``work_us`` microseconds more per step.

Such envs are where ``env.backend: gymnasium_async`` pays: each env steps in a process of its own
while the process holding the policy acts for all of them in one forward pass
(``benchmarks/env_processes_bench.py``). Train it with
``env.id: examples.costly_cartpole:CostlyCartPole`` and ``env.max_episode_steps: 500`` (from the
repository root, so that ``examples`` is importable).
"""

from __future__ import annotations

import time

from gymnasium.envs.classic_control.cartpole import CartPoleEnv


class CostlyCartPole(CartPoleEnv):
    def __init__(self, work_us: float = 500.0) -> None:
        super().__init__()
        self.work_s = work_us * 1e-6

    def step(self, action):
        end = time.perf_counter() + self.work_s
        while time.perf_counter() < end:  # busy, as a simulator computing is: it holds a core
            pass
        return super().step(action)
