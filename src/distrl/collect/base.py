"""The one collector protocol and the one way to build a collector.

A ``Collector`` hands a rank segments of whatever its algorithm learns from (rollouts for PPO
and A2C, transitions for DQN and SAC): a rank's own envs, its Ray env workers and its collector
processes all implement it, so a runner never asks where its samples come from. Each
segment says which version of the policy acted (``storage.segments``).

An algorithm declares its collector once (``Algorithm.collector``, built from
``CollectorInputs``) and what it acts with (``Algorithm.acting``); a rank over its own envs and an
env worker over its part of them both build theirs with ``build_collector``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import gymnasium as gym
import torch
from torch import nn

from distrl.envs import VecEnv
from distrl.errors import UserError
from distrl.timing import PhaseClock
from distrl.user_code import load

if TYPE_CHECKING:
    from distrl.config.run import RunConfig

SegmentT = TypeVar("SegmentT", covariant=True)


def never(steps: int) -> bool:
    """The cut of a collection that always collects whole."""
    return False


@dataclass(frozen=True)
class CollectRequest:
    """What a learner asks of its collector for one segment."""

    policy_version: int
    """The learner's updates so far in this launch: the version of the weights it asks to act with,
    which the segment carries (an env worker's: the version of the weights it was sent)."""
    exploration: float = 0.0
    """Replay-based algorithms: how much to explore (DQN's epsilon; SAC's 1 for uniformly random
    actions before ``learning_starts``)."""
    should_stop: Callable[[int], bool] = never
    """On-policy algorithms: ``should_stop(steps so far)`` cuts a rank's own rollout short (the
    straggler cut-off); env workers always collect whole ones."""


class Collector(Protocol[SegmentT]):
    """Where a rank's segments come from: its own envs (``EnvCollector``s), its env workers
    (``ray.env_workers.RemoteCollection``) or its collector processes
    (``collect.processes.LaggedCollection``). Sequence policies have the same seam for their
    completions (``collect.completions.CompletionSource``: the learner's own generation or its
    generation workers, each step's completions carrying the version that sampled them)."""

    def reset(self) -> torch.Tensor:
        """Reset every env; their first observations, as the envs gave them."""
        ...

    def collect(self, request: CollectRequest) -> SegmentT:
        """One segment of all the rank's envs (``algo.rollout_steps`` steps, fewer where
        ``request.should_stop`` cuts it), on the rank's device."""
        ...

    def counts(self) -> dict[str, float]:
        """Events of this rank's collection since the launch started (``IterationResult.counted``)."""
        ...

    def figures(self) -> dict[str, float]:
        """Figures of the segment just collected, averaged over ranks in its update's metrics row
        (``IterationResult.averaged``): collectors apart from the rank say how full their queues
        were and how much of their time they waited for the learner."""
        ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class CollectorInputs:
    """What an algorithm's collector is built from (``Algorithm.collector``)."""

    cfg: RunConfig
    env: VecEnv
    """The envs it steps: a rank's own, or an env worker's part of them."""
    modules: dict[str, nn.Module]
    """What acts, by checkpoint name: the rank's live modules, or an env worker's copies (each
    segment's weights loaded into them)."""
    noise_seed: list[int]
    """The rank's action-noise seed (``collect.rollout.noise_seed``)."""
    noise_rows: int
    """The rank's envs: each step's action noise is drawn for all of them ..."""
    part: slice
    """... and cut to these rows, ``env``'s among them, so splitting a rank's envs over workers
    changes no env's action."""
    device: torch.device
    clock: PhaseClock | None = None
    """Where stepping and acting are timed (the training loop's clock; an env worker's own)."""


def _declared(cfg: RunConfig, field: str, needed: str) -> Any:
    """``Algorithm.<field>`` of ``cfg``'s algorithm, imported; one line when it declares none."""
    reference = getattr(cfg.algorithm, field)
    if reference is None:
        raise UserError(
            f"algo.name={cfg.algo.name} declares no Algorithm.{field}, which {needed}",
            code="algo-field-undeclared",
        )
    return load(reference)


def build_collector(inputs: CollectorInputs) -> Collector[Any]:
    """The collector ``inputs.cfg``'s algorithm declares (``Algorithm.collector``)."""
    return _declared(inputs.cfg, "collector", "collecting from envs needs")(inputs)


def acting_copies(
    cfg: RunConfig, observation_space: gym.Space, action_space: gym.Space, device: torch.device
) -> dict[str, nn.Module]:
    """Fresh modules of what ``cfg``'s algorithm acts with, by checkpoint name (``Algorithm.acting``):
    an env worker's, which loads the weights of each version it is sent into them."""
    return _declared(cfg, "acting", "env workers act with")(cfg, observation_space, action_space, device)


class EnvWorkers(Protocol):
    """Processes that step a rank's envs for it (Ray mode's environment workers, collector
    processes beside the rank), whatever the algorithm: each acts with a copy of what the rank acts
    with and hands back segments."""

    def start(self, cfg: RunConfig, seeds: list[int], noise_seed: list[int]) -> tuple[gym.Space, gym.Space]:
        """Build the envs (global seeds ``seeds``, shared out over the workers) and each worker's
        collector and acting copy for ``cfg``'s algorithm; their (observation space, action space)."""
        ...

    def acting(
        self, modules: dict[str, nn.Module], device: torch.device, clock: PhaseClock | None = None
    ) -> Collector[Any]:
        """The workers as the rank's collector, acting with the state of ``modules`` (by their
        checkpoint names) at each request's version, their parts joined on ``device``; what the
        rank waits for timed on ``clock``."""
        ...


class EnvCollector:
    """What a collector over a rank's own envs (or a worker's part of them) keeps between
    segments: the observation the next one starts from and the envs reset since the last one."""

    def __init__(self, env: VecEnv, device: torch.device, clock: PhaseClock | None) -> None:
        self.env = env
        self.device = device
        self.clock = clock or PhaseClock()
        """Where stepping and acting are timed (the training loop's clock; an env worker's own)."""
        self.obs: torch.Tensor | None = None
        self.restarted = torch.zeros(env.num_envs, dtype=torch.bool, device=device)

    def reset(self) -> torch.Tensor:
        self.obs = self.env.reset().to(self.device)
        self.restarted.fill_(True)
        return self.obs

    def take_restarted(self) -> torch.Tensor:
        """The envs reset since the last segment (cleared: the next segment continues them)."""
        restarted, self.restarted = self.restarted, torch.zeros_like(self.restarted)
        return restarted

    def counts(self) -> dict[str, float]:
        return {}

    def figures(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        self.env.close()
