"""Ray mode's verifier workers (GRPO's ``workers.verifier``): actors that score a learner's completions
with the task's reward functions, so that slow verifiers (a sandbox, a checker) run beside the
learners instead of inside them.

A learner splits each step's completions over its verifiers and waits for all parts. A verifier
that dies is restarted by Ray; the learner logs the cause, waits with exponential backoff, loads
the reward functions into it again and has it score the same part again, whole: no reward is
lost or counted twice (``verifier_worker_failures`` counts the failures). A reward function that
raises or returns a non-number is bad input: its one line stops the run, as without Ray.
"""

from __future__ import annotations

from collections.abc import Sequence

from distrl.algos.grpo_config import TaskConfig
from distrl.ray.workers import RestartedByRay, StartedWorkers, WorkerActor
from distrl.tasks.prompts import Example
from distrl.tasks.verifiers import RewardFunctions, Scores


class VerifierWorker(WorkerActor):
    """The actor: the task's reward functions, loaded once."""

    work_unit = "completions"

    def __init__(self, profile_calls: int = 0, profile_path: str = "") -> None:
        super().__init__(profile_calls, profile_path)
        self.functions: RewardFunctions | None = None

    def start(self, task: TaskConfig) -> None:
        self.functions = RewardFunctions(task)

    def score(self, examples: Sequence[Example], completions: Sequence[str], ended: Sequence[bool]) -> Scores:
        if self.functions is None:  # Ray restarted this actor between two of the learner's calls
            raise RestartedByRay("its reward functions")
        scores = self.functions.score(examples, completions, ended)
        self.did(len(completions))
        return scores


class RayVerifierWorkers(StartedWorkers):
    """A learner's verifier workers, scoring as ``tasks.verifiers.RewardFunctions`` does."""

    retried = "scoring its part"

    def start(self, task: TaskConfig) -> RayVerifierWorkers:
        self.start_all(task)
        return self

    def score(self, examples: Sequence[Example], completions: Sequence[str], ended: Sequence[bool]) -> Scores:
        """Each verifier scores a consecutive part; the parts' scores joined in order."""
        args = [(examples[part], completions[part], ended[part]) for part in self.parts(len(examples))]
        return Scores.joined(self.call_each("score", args))
