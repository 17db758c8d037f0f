"""Ray mode's generation workers (GRPO's ``workers.generation``): actors that hold a copy of a
learner's policy and generate its completions, so that generating and training overlap
(asynchronous GRPO).

Each learner has its own workers and splits each step's prompts over them. Its weights go into
Ray's object store once per update, as a version (the learner's updates so far in this launch); a
worker loads a version once however often it generates with it. With ``collect.lag: K`` the
workers run K steps ahead on a fixed schedule: step ``s`` of the launch is generated with the
weights of update ``max(s - K, 0)``, so the learner trains on step ``s`` while the workers
generate step ``s + K``, and a seed gives the same run every time. At ``K = 0`` each step is
generated with the learner's current weights: the same completions as the learner's own.

A worker that dies is restarted by Ray, set up again, its part generated again and its queued
steps sent again (``generation_worker_failures`` counts the failures): no completion is lost or
taken twice.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from distrl.collect.ahead import Schedule
from distrl.collect.completions import Generated, StepPrompts, generate_step, joined
from distrl.collect.weights import ActingWeights, PublishedWeights
from distrl.models.generate import Completions
from distrl.models.sequence_policy import sequence_model, sequence_tokenizer
from distrl.precision import low_precision
from distrl.ray.workers import QueuedCall, RestartedByRay, StartedWorkers, WorkerActor
from distrl.tasks.prompts import Example
from distrl.timing import PhaseClock

if TYPE_CHECKING:
    from distrl.config.run import RunConfig


class GenerationWorker(WorkerActor):
    """The actor: a CPU copy of the learner's sequence policy, which generates completions."""

    work_unit = "completions"

    def __init__(self, profile_calls: int = 0, profile_path: str = "") -> None:
        super().__init__(profile_calls, profile_path)
        self.cfg: RunConfig | None = None

    def start(self, cfg: RunConfig) -> None:
        torch.set_num_threads(cfg.train.torch_threads)
        self.cfg = cfg
        self.tokenizer = sequence_tokenizer(cfg)
        self.model = sequence_model(cfg, self.tokenizer).requires_grad_(False)
        self.dtype = low_precision(cfg.train.mixed_precision, torch.device("cpu"), heavy_model=True)
        self.version = -1
        """The version of the weights loaded (none yet)."""

    def generate(
        self, weights: ActingWeights, step: int, indices: list[int], prompts: list[str]
    ) -> Completions:
        """Completions of ``prompts`` (global ``indices``) at ``step``, sampled with ``weights``,
        their log-probabilities kept (the learner's importance weights divide by them)."""
        if self.cfg is None:  # Ray restarted this actor between two of the learner's calls
            raise RestartedByRay("its policy")
        if weights.version != self.version:
            self.model.load_state_dict(weights.tensors["policy"])
            self.version = weights.version
        done = generate_step(
            self.cfg, self.model, self.tokenizer, step, indices, prompts, torch.device("cpu"), self.dtype,
            keep_log_probs=True,
        )  # fmt: skip
        self.did(len(done.tokens))
        return done


class RayGenerationWorkers(StartedWorkers):
    """A learner's generation workers."""

    retried = "generating its part"

    def start(self, cfg: RunConfig) -> RayGenerationWorkers:
        self.start_all(cfg)
        self.schedule = Schedule.of(cfg.collect)
        """How the workers generate ahead of the learner (``collect.*``)."""
        return self

    def acting(
        self,
        policy: torch.nn.Module,
        step_prompts: StepPrompts,
        pad_id: int,
        device: torch.device,
        clock: PhaseClock,
    ) -> RemoteGeneration:
        return RemoteGeneration(self, policy, step_prompts, pad_id, self.schedule, device, clock)


@dataclass
class QueuedStep:
    """A step sent to every generation worker: the examples it answers, the version of the weights
    it is generated with, and the workers' call."""

    step: int
    indices: list[int]
    examples: list[Example]
    version: int
    call: QueuedCall


class RemoteGeneration:
    """A learner's completions from its generation workers, ``schedule.lag`` steps ahead
    (``collect.completions.CompletionSource``); ``clock`` times the learner's side: publishing
    weights and waiting for completions."""

    def __init__(
        self,
        workers: RayGenerationWorkers,
        policy: torch.nn.Module,
        step_prompts: StepPrompts,
        pad_id: int,
        schedule: Schedule,
        device: torch.device,
        clock: PhaseClock,
    ) -> None:
        import ray

        self.workers = workers
        self.weights = PublishedWeights({"policy": policy}, ray.put)
        """Each version's weights in Ray's object store, put once for all workers."""
        self.step_prompts = step_prompts
        self.pad_id = pad_id
        self.schedule = schedule
        """Exact weights only (``collect.ahead.REFUSALS``): step s with update s - lag's."""
        self.device = device
        self.clock = clock
        self.queued: deque[QueuedStep] = deque()
        """Steps sent to the workers and not yet taken, oldest first."""

    def completions(self, step: int, policy_version: int) -> Generated:
        with self.clock("publish"):
            weights, _ = self.weights.publish(policy_version)
            # Steps up to step + lag are generated with these weights (the first call's: all of them).
            while len(self.queued) <= self.schedule.requested_ahead:
                self.queued.append(self.send(step + len(self.queued), weights, policy_version))
        with self.clock("generate"):
            queued = self.queued.popleft()
            assert queued.step == step, (queued.step, step)  # the loop asks for every step in turn
            parts = self.workers.take(queued.call, [later.call for later in self.queued])
        done = joined(parts, self.pad_id)
        on_device = {k: None if v is None else v.to(self.device) for k, v in vars(done).items()}
        return Generated(Completions(**on_device), queued.examples, queued.indices, queued.version)

    def send(self, step: int, weights: Any, version: int) -> QueuedStep:
        """Every worker's part of ``step``'s prompts, sent."""
        indices, examples = self.step_prompts(step)
        args = [
            (weights, step, indices[part], [e.prompt for e in examples[part]])
            for part in self.workers.parts(len(indices))
        ]
        return QueuedStep(step, indices, examples, version, self.workers.send("generate", args))
