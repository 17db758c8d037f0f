"""A part of one rank's envs collected away from the rank: in a Ray env worker
(``ray.env_workers``) or in a collector process beside the rank (``collect.processes``).

It holds a CPU copy of what acts (its algorithm's ``Algorithm.acting``), loads the weights of a
version once however often it collects with them, and runs the collector a rank builds over its
own envs (``collect.base.build_collector``). Actions come from the rank's ``ActionNoise`` cut to
the part's envs, so a rank whose envs are split into parts collects exactly what it collects
alone.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import gymnasium as gym
import numpy as np
import torch

from distrl.collect.base import Collector, CollectorInputs, CollectRequest, acting_copies, build_collector
from distrl.collect.weights import ActingWeights
from distrl.envs import make_vec_env
from distrl.storage.segments import Segment

if TYPE_CHECKING:
    from distrl.config.run import RunConfig


class CollectorPart:
    """Envs ``seeds`` of a rank (its envs from index ``first``), stepped with a CPU copy of what
    acts for the rank."""

    def __init__(
        self,
        cfg: RunConfig,
        seeds: list[int],
        noise_seed: list[int],
        noise_rows: int,
        first: int,
        generation: int = 0,
    ) -> None:
        """``generation`` > 0 (a rebuild after a failure) derives fresh env seeds and noise from
        the given ones."""
        if generation:
            seeds = [int(np.random.SeedSequence([s, generation]).generate_state(1)[0]) for s in seeds]
            noise_seed = [*noise_seed, generation]
        torch.set_num_threads(1)
        cpu = torch.device("cpu")
        env = make_vec_env(cfg.env, seeds, cpu)
        self.spaces: tuple[gym.Space, gym.Space] = (env.observation_space, env.action_space)
        self.modules = acting_copies(cfg, env.observation_space, env.action_space, cpu)
        """What each segment's weights are loaded into, by name."""
        part = slice(first, first + len(seeds))
        self.collector: Collector[Segment] = build_collector(
            CollectorInputs(cfg, env, self.modules, noise_seed, noise_rows, part, cpu)
        )
        self.version = -1
        """The version of the weights loaded (none yet)."""

    def reset(self) -> torch.Tensor:
        return self.collector.reset()

    def collect(self, weights: ActingWeights, request: CollectRequest) -> Segment:
        """One segment acting with ``weights``, tagged with their version."""
        if weights.version != self.version:
            for name, module in self.modules.items():
                module.load_state_dict(weights.tensors[name])
            self.version = weights.version
        return self.collector.collect(replace(request, policy_version=self.version))

    def close(self) -> None:
        self.collector.close()
