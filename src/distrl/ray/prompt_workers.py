"""Ray mode's prompt workers (GRPO's ``workers.prompt``): actors that serve a learner its prompts, so
that reading and preparing a large prompt set happens beside the learners.

Prompts are keyed by their global index (``tasks.prompts``): a learner asks its workers for its
own share of each step's indices, so the workers' output is seeded, sharded by learner, and
resumes where the run's step says, with no cursor of their own to lose. A worker that dies is
restarted by Ray, set up again and asked for the same prompts again (``prompt_worker_failures``
counts the failures).
"""

from __future__ import annotations

from collections.abc import Sequence

from distrl.algos.grpo_config import TaskConfig
from distrl.ray.workers import RestartedByRay, StartedWorkers, WorkerActor
from distrl.tasks.prompts import Example, PromptSource


class PromptWorker(WorkerActor):
    """The actor: the task's training prompts."""

    work_unit = "prompts"

    def __init__(self, profile_calls: int = 0, profile_path: str = "") -> None:
        super().__init__(profile_calls, profile_path)
        self.source: PromptSource | None = None

    def start(self, task: TaskConfig, seed: int) -> None:
        self.source = PromptSource(task, seed, held_out_side=False)

    def examples(self, indices: Sequence[int], progress: float) -> list[Example]:
        if self.source is None:  # Ray restarted this actor between two of the learner's calls
            raise RestartedByRay("its prompts")
        examples = self.source.examples(indices, progress)
        self.did(len(examples))
        return examples


class RayPromptWorkers(StartedWorkers):
    """A learner's prompt workers, serving as ``tasks.prompts.PromptSource`` does."""

    retried = "serving its prompts"

    def start(self, task: TaskConfig, seed: int) -> RayPromptWorkers:
        self.start_all(task, seed)
        return self

    def examples(self, indices: Sequence[int], progress: float = 1.0) -> list[Example]:
        served = self.call_each("examples", [(indices[part], progress) for part in self.parts(len(indices))])
        return [example for part in served for example in part]
