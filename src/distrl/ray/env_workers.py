"""Ray mode's environment workers: actors that each step a part of one learner's envs.

A worker holds a CPU copy of what acts (PPO's policy and normalisers, DQN's Q-network; its
algorithm's ``Algorithm.acting``), refreshed from one object in Ray's object store when the
learner's policy version changes (never per step), runs the collector a rank builds over its own
envs (``collect.base.build_collector``), and returns its segment, tagged with the version of the
weights it acted with; the learner joins its workers' segments along the env axis. Actions come
from the rank's ``ActionNoise`` cut to the worker's envs, so one learner with N env workers
collects exactly what one process with the same envs collects (with ``train.compile``, to the
last bits of compiled acting: ~1e-5).

A worker that dies (killed, out of memory) is restarted by Ray; one whose env raised is kept (a
``UserError``, bad input, stops the run with its one line instead). Either way the learner logs
the cause, waits with exponential backoff, rebuilds the worker's envs
(fresh seeds) and collects that worker's part of the rollout again, giving up after
``workers.max_restarts`` failures in a row. A part is only ever taken whole, so no sample is lost
or counted twice.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from distrl.algos.registry import WorkerGroup
from distrl.allocator import keep_freed_memory
from distrl.collect.base import (
    Collector,
    CollectorInputs,
    CollectRequest,
    acting_copies,
    build_collector,
    never,
)
from distrl.config.run import RunConfig
from distrl.envs import make_vec_env
from distrl.errors import UserError
from distrl.ray.workers import RestartableWorkers, WorkerActor
from distrl.sharding import even_split
from distrl.storage.segments import Segment


@dataclass(frozen=True)
class ActingWeights:
    """What an env worker acts with for a segment: tensors by module name (the algorithm's acting
    modules, as in its checkpoints), and their version (the learner's updates so far in this
    launch, ``CollectRequest.policy_version``). A worker loads a version once, however often it
    collects with it or a part is retried with it."""

    version: int
    tensors: dict[str, dict[str, torch.Tensor]]


class EnvWorker(WorkerActor):
    """The actor: a part of one learner's envs, stepped with a CPU copy of what acts for it
    (whatever the algorithm registers as its ``acting`` and ``collector``)."""

    work_unit = "env steps"

    def __init__(self, profile_calls: int = 0, profile_path: str = "") -> None:
        super().__init__(profile_calls, profile_path)
        keep_freed_memory()  # once per actor process: a rebuild after a failure needs it no more
        self.collector: Collector[Segment] | None = None
        self.modules: dict[str, torch.nn.Module] = {}
        """What each segment's weights are loaded into, by name."""
        self.version = -1
        """The version of the weights loaded (none yet)."""

    def start(
        self,
        cfg: RunConfig,
        seeds: list[int],
        noise_seed: list[int],
        noise_rows: int,
        first: int,
        generation: int = 0,
    ) -> tuple[gym.Space, gym.Space]:
        """Build the envs, the acting copy and the collector for ``cfg``'s algorithm (as a rank
        builds its own); ``generation`` > 0 (a rebuild after a failure) derives fresh env seeds
        and noise from the given ones."""
        if self.collector is not None:  # rebuilt after a failure: the old envs go first
            self.collector.close()
        if generation:
            seeds = [int(np.random.SeedSequence([s, generation]).generate_state(1)[0]) for s in seeds]
            noise_seed = [*noise_seed, generation]
        torch.set_num_threads(1)
        cpu = torch.device("cpu")
        env = make_vec_env(cfg.env, seeds, cpu)
        self.modules = acting_copies(cfg, env.observation_space, env.action_space, cpu)
        part = slice(first, first + len(seeds))
        self.collector = build_collector(
            CollectorInputs(cfg, env, self.modules, noise_seed, noise_rows, part, cpu)
        )
        self.version = -1
        return env.observation_space, env.action_space

    def reset(self) -> torch.Tensor:
        return self._live_collector().reset()

    def collect(self, weights: ActingWeights, request: CollectRequest) -> Segment:
        """One segment of the worker's envs acting with ``weights``, tagged with their version."""
        collector = self._live_collector()
        if weights.version != self.version:
            for name, module in self.modules.items():
                module.load_state_dict(weights.tensors[name])
            self.version = weights.version
        segment = collector.collect(replace(request, policy_version=self.version))
        self.did(segment.steps * segment.obs.shape[1])
        return segment

    def _live_collector(self) -> Collector[Segment]:
        if self.collector is None:  # Ray restarted this actor between two of the learner's calls
            raise RuntimeError("restarted by Ray (killed or out of memory), it lost its envs")
        return self.collector


class RayEnvWorkers(RestartableWorkers):
    """A learner's env workers (``collect.base.EnvWorkers``)."""

    retried = "its part"

    def __init__(self, group: WorkerGroup, handles: list[Any], max_restarts: int, backoff_s: float) -> None:
        super().__init__(group, handles, max_restarts, backoff_s)
        self._start_args: list[tuple[Any, ...]] = []

    def start(self, cfg: RunConfig, seeds: list[int], noise_seed: list[int]) -> tuple[gym.Space, gym.Space]:

        if len(seeds) < len(self.handles):
            raise UserError(
                f"workers.env gives this learner {len(self.handles)} env workers for its {len(seeds)} envs; "
                f"every env worker needs at least one env (raise env.num_envs or lower workers.env)"
            )
        self._start_args = []
        for i in range(len(self.handles)):
            first, count = even_split(len(seeds), i, len(self.handles))
            self._start_args.append((cfg, seeds[first : first + count], noise_seed, len(seeds), first))
        return self.call_each("start", self._start_args)[0]

    def acting(self, modules: dict[str, torch.nn.Module], device: torch.device) -> RemoteCollection:
        return RemoteCollection(self, modules, device)

    def set_up(self, index: int, rebuild: int) -> None:
        """Build and reset the worker's envs again, with fresh env seeds and noise per rebuild."""
        import ray

        handle = self.handles[index]
        ray.get(handle.start.remote(*self._start_args[index], generation=rebuild))
        ray.get(handle.reset.remote())


class RemoteCollection:
    """A learner's env workers acting with the state of ``modules`` (by name) at each request's
    version: its collector (``collect.base.Collector``), rollouts or transitions alike."""

    def __init__(
        self, workers: RayEnvWorkers, modules: dict[str, torch.nn.Module], device: torch.device
    ) -> None:
        self.workers = workers
        self.modules = modules
        self.device = device

    def reset(self) -> torch.Tensor:
        return torch.cat(self.workers.call_all("reset")).to(self.device)

    def collect(self, request: CollectRequest) -> Segment:
        """Every worker's part, joined: each acts with the modules' tensors, put in Ray's object
        store once for all of them as version ``request.policy_version``, and collects its part
        in full (``request.should_stop``, the straggler cut-off, is not applied to remote envs)."""
        import ray

        tensors = {name: _cpu_state(module) for name, module in self.modules.items()}
        weights = ray.put(ActingWeights(request.policy_version, tensors))
        parts = self.workers.call_all("collect", weights, replace(request, should_stop=never))
        return type(parts[0]).join(parts, self.device)

    def counts(self) -> dict[str, float]:
        return self.workers.counts()

    def close(self) -> None:
        """The workers belong to the Ray job and end with it."""


def _cpu_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().to("cpu", copy=True) for k, v in module.state_dict().items()}
