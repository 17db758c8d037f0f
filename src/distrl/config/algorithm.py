"""What every algorithm's ``algo:`` section declares for the shared code: the training loop, the
size table, resume and the phase clock read these and never an algorithm's name. A new
algorithm's section subclasses ``AlgorithmSection`` (``docs/algorithms/your-own.md``)."""

from __future__ import annotations

from abc import abstractmethod
from typing import ClassVar, Protocol

from pydantic import PositiveFloat

from distrl.config.base import Section, Size
from distrl.config.sections import DataConfig, EnvConfig, TrainConfig


class RunSections(Protocol):
    """What an algorithm's section reads of the whole run's config (``config.run.RunConfig`` is
    one), named by the shared sections: the run's config sits a layer above the algorithms'."""

    @property
    def env(self) -> EnvConfig: ...
    @property
    def train(self) -> TrainConfig: ...
    @property
    def data(self) -> DataConfig: ...


class AlgorithmSection(Section):
    """An algorithm's hyperparameters, and what the shared code needs to know of it."""

    resume_fixed_keys: ClassVar[tuple[str, ...]] = ()
    """Keys a resumed run may not change although they change no shape of what the checkpoint
    holds (``model.activation``): a change of shape, or a module added or removed, is refused
    from the checkpoint's tensors for every algorithm (``io.train_state.restore``)."""
    sections: ClassVar[dict[str, type[Section]]] = {}
    """The run config's sections it brings, by top-level key: one of its own (GRPO's ``task``),
    or a subclass of a shared one with keys only it reads (GRPO's ``model.transformer``, DQN's
    ``eval.cpe_*``). Another algorithm's run refuses them in one line (``config.run``)."""
    step_unit: ClassVar[str] = "env steps"
    """What ``train.total_steps`` counts, in the final line."""
    honoured_train_switches: ClassVar[tuple[str, ...]] = ()
    """The ``train`` keys (``config.rules.TRAIN_SWITCHES``) its torch learner honours."""
    normalizes: ClassVar[bool] = False
    """Its runner keeps the running normalisers ``normalize.observations`` and
    ``normalize.rewards`` ask for (PPO's runner does); any other refuses them (``config.rules``)."""
    phases: ClassVar[tuple[str, ...]] = ()
    """Phases its runner times beyond ``timing.SHARED_PHASES`` (``time/<phase>`` metrics)."""
    collection_phases: ClassVar[tuple[str, ...]] = ("env", "inference")
    """The phases in which a rank gathers samples: their sum divides the samples it collected
    (each rank's speed, to name the slowest)."""

    name: str
    """The algorithm (``algos.registry``), or ``module:ATTRIBUTE`` of one defined outside distrl."""
    learning_rate: PositiveFloat
    """The optimiser's learning rate (its start, with ``anneal_lr``)."""
    anneal_lr: bool = False
    """Linearly decay the learning rate to zero over ``train.total_steps``."""

    @abstractmethod
    def sizes(self, run: RunSections, world_size: int) -> list[Size]:
        """The run's sizes over all ranks and on each (``distrl config --ranks N``)."""
