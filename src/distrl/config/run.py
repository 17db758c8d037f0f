"""The whole run's config: the component sections (``distrl.config.sections``), the chosen
algorithm's own section (``distrl.algos.registry``) and the sections that algorithm brings
(``AlgorithmSection.sections``), read from a YAML file with dotted command-line overrides and
validated by pydantic. Every problem found is reported, each on a line of its own that names
the key."""

from __future__ import annotations

import difflib
import functools
import sys
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    Field,
    SerializeAsAny,
    ValidationError,
    create_model,
    field_validator,
)

from distrl.algos.registry import ALGORITHMS, Algorithm, algorithm
from distrl.config.algorithm import AlgorithmSection
from distrl.config.base import Section
from distrl.config.grpo_vocabulary import translate_grpo_section
from distrl.config.rules import check_across_sections
from distrl.config.sections import (
    GENERIC_WORKER_GROUPS,
    CheckpointConfig,
    ClusterConfig,
    CollectConfig,
    CommConfig,
    DataConfig,
    EnvConfig,
    EvalConfig,
    LogConfig,
    ModelConfig,
    NormalizeConfig,
    OutputConfig,
    TrainConfig,
    WorkersConfig,
    WorkersSection,
    group_keys,
    workers_section,
)
from distrl.errors import UserError

AlgorithmConfig = SerializeAsAny[AlgorithmSection]
"""Any algorithm's section, its class chosen by ``name`` (``RunConfig._algorithm_section``) and
written out whole."""
WorkersOfAlgorithm = SerializeAsAny[WorkersSection]
"""The ``workers:`` section of the run's algorithm's worker groups (``workers_config``), written
out whole."""


class RunConfig(Section):
    ml_framework: Literal["torch", "jax"] = "torch"
    """The learner's framework: ``jax`` trains PPO with JAX, Flax and Optax (the ``jax`` extra;
    several processes through ``python -m distrl.launch.jax``); configs, run dirs and checkpoints
    are the same as torch's."""
    env: EnvConfig = Field(default_factory=EnvConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    algo: AlgorithmConfig = Field(default_factory=lambda: algorithm("ppo").config())
    """The algorithm's own section, chosen by ``algo.name`` (``algos.registry``; ppo when unset)."""
    normalize: NormalizeConfig = Field(default_factory=NormalizeConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    comm: CommConfig = Field(default_factory=CommConfig)
    collect: CollectConfig = Field(default_factory=CollectConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    # Validated by ``config_from_dict`` as the run's algorithm's (``workers_config``).
    workers: WorkersOfAlgorithm = Field(default_factory=WorkersConfig)

    @property
    def algorithm(self) -> Algorithm:
        """What ``algo.name`` declares (``algos.registry``), looked up as ``algo`` was: how code
        the registry names (a collector, a runner) reads its algorithm's other declarations
        without importing the registry, which names it."""
        return algorithm(self.algo.name)

    @field_validator("algo", mode="before")
    @classmethod
    def _algorithm_section(cls, value: Any) -> Any:
        """A mapping becomes the section of the algorithm it names (ppo when unnamed)."""
        return algorithm_section(value) if isinstance(value, dict) else value

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (to Ray's actors) as its values, validated again where it lands: a run's class
        is built for its algorithm (``run_config_class``) and has no name to import."""
        return config_from_dict, (self.model_dump(mode="json"), "config")


@functools.cache
def run_config_class(section: type[AlgorithmSection]) -> type[RunConfig]:
    """The config of a run of the algorithm whose ``algo:`` section is ``section``: the shared
    sections, with the ones it brings added or in place of the shared ones they extend."""
    if not section.sections:
        return RunConfig
    fields: dict[str, Any] = {key: (cls, Field(default_factory=cls)) for key, cls in section.sections.items()}
    return create_model(f"{section.__name__}Run", __base__=RunConfig, **fields)


def algorithm_section(data: dict[str, Any]) -> AlgorithmSection:
    """``algo:`` validated as the section of the algorithm it names (ppo when unnamed)."""
    named = {**data, "name": data.get("name", "ppo")}
    return algorithm(str(named["name"])).config.model_validate(named)


def workers_config(algorithm_name: str) -> type[WorkersSection]:
    """The ``workers:`` section of ``algorithm_name``'s runs: the generic groups' keys, each
    group the algorithm replaces by one of its own in its place, its other groups after them
    (``Algorithm.worker_groups``)."""
    own = algorithm(algorithm_name).worker_groups
    instead = {group.replaces: group for group in own if group.replaces in GENERIC_WORKER_GROUPS}
    groups = [
        (instead[name].name, instead[name].about) if name in instead else (name, about)
        for name, about in GENERIC_WORKER_GROUPS.items()
    ]
    groups += [(group.name, group.about) for group in own if group.replaces not in instead]
    return workers_section(tuple(groups))


def _algorithm_name(data: dict[str, Any]) -> str:
    """The ``algo.name`` a config's raw mapping gives (ppo when unnamed)."""
    algo = data.get("algo")
    return str(algo.get("name", "ppo")) if isinstance(algo, dict) else "ppo"


def _worker_totals(workers: dict[str, Any], groups: list[str], cluster: Any) -> dict[str, Any]:
    """``workers:`` with each ``<group>_per_node`` x ``cluster.num_nodes`` as the group's total."""
    workers = dict(workers)
    nodes = cluster.get("num_nodes", 1) if isinstance(cluster, dict) else 1
    for group in ["policy", *groups]:
        key = group_keys(group)[1]
        per_node = workers.get(key)
        if per_node is None:
            continue
        if group in workers:
            raise UserError(
                f"workers.{group} and workers.{key} exclude each other: give one",
                code="config-workers-count-twice",
            )
        # Anything but whole numbers is left for the fields' own checks to name.
        if isinstance(per_node, int) and isinstance(nodes, int):
            workers[group] = per_node * nodes
            del workers[key]
    return workers


def load_config(path: str | Path | None, overrides: list[str] = ()) -> RunConfig:
    """Read a YAML config (or defaults when ``path`` is None) and apply ``a.b=value`` overrides."""
    data: dict[str, Any] = {}
    if path is not None:
        data = _read_yaml(Path(path))
    for override in overrides:
        key, value = _parse_override(override)
        _set_dotted(data, key, value)
    source = str(path) if path else "config"
    cfg = config_from_dict(data, source)
    check_across_sections(cfg, source)
    return cfg


MOVED_KEYS = {f"train.{key}": f"comm.{key}" for key in ("timeout_s", "network_interface", "sync_spin_ms")}
"""Keys that moved to another section: still read from the old place, with a warning."""


def config_from_dict(data: dict[str, Any], source: str = "config") -> RunConfig:
    """Validate a plain dict; every problem is a line of the ``UserError``, naming its key."""
    data = translate_grpo_section(_move_deprecated_keys(data, source), source)
    name = _algorithm_name(data)
    run_class = run_config_class(algorithm(name).config)
    data = _read_replaced_groups(_without_defaults_of_other_algorithms(data, run_class), name, source)
    problems = _unknown_keys(data, run_class, "", name)
    if problems:
        raise UserError("\n".join(problems), code="config-key-unknown")
    errors: list[Any] = []
    workers, cluster = workers_config(name), data.get("cluster")
    # Validated apart, as the sections of the run's algorithm (one from outside has its own).
    apart = {
        "algo": algorithm_section,
        "workers": lambda given: workers.model_validate(
            _worker_totals(given, workers.group_names(), cluster)
        ),
    }
    for key, validate in apart.items():
        given = data.get(key, {})
        if not isinstance(given, dict):
            continue
        try:
            data = {**data, key: validate(given)}
        except ValidationError as exc:
            errors += [{**err, "loc": (key, *err["loc"])} for err in exc.errors()]
            data = {other: value for other, value in data.items() if other != key}
    try:
        cfg = run_class.model_validate(data)
    except ValidationError as exc:
        errors += exc.errors()
    if errors:  # in the order of the config's sections
        order = {section: index for index, section in enumerate(run_class.model_fields)}
        errors.sort(key=lambda err: order.get(err["loc"][0], -1) if err["loc"] else -1)
        raise UserError(
            "\n".join(_problem(source, err) for err in errors), code="config-value-invalid"
        ) from None
    return cfg


def changed_keys(before: RunConfig, after: RunConfig) -> dict[str, tuple[Any, Any]]:
    """``{dotted key: (before, after)}`` for every value that differs, in ``after``'s order and
    then the keys only ``before`` has (another algorithm's section); a missing key is None."""
    was, now = _dotted_values(before.model_dump(mode="json")), _dotted_values(after.model_dump(mode="json"))
    keys = [*now, *(key for key in was if key not in now)]
    return {key: (was.get(key), now.get(key)) for key in keys if was.get(key) != now.get(key)}


def describe_changes(saved_config: dict[str, Any], cfg: RunConfig, where: str) -> str:
    """The config keys that differ between a checkpoint's run (its saved config, read as
    today's) and ``cfg``, the first few of them: what the user changed that built another
    network."""
    changes = changed_keys(config_from_dict(saved_config, where), cfg)
    if not changes:
        return "no config key changed: the env or distrl's code builds another network now"
    shown = [f"{key} {was!r} -> {now!r}" for key, (was, now) in list(changes.items())[:CHANGES_SHOWN]]
    more = len(changes) - len(shown)
    return "changed: " + ", ".join(shown) + (f" and {more} more" if more else "")


CHANGES_SHOWN = 3
"""Changed config keys ``describe_changes`` names; it counts the rest."""


def _dotted_values(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every value of a nested mapping by its dotted key (``model.hidden_sizes``); lists are values."""
    values: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            values.update(_dotted_values(value, f"{prefix}{key}."))
        else:
            values[f"{prefix}{key}"] = value
    return values


def _problem(source: str, err: Any) -> str:
    """One line for one of pydantic's errors."""
    key = ".".join(str(p) for p in err["loc"])
    if err["type"] == "value_error":  # our own validators' messages say it all
        return f"{source}: {key}: {err['msg'].removeprefix('Value error, ')}"
    return f"{source}: {key}: {err['msg']} (got {err.get('input')!r})"


def _read_yaml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        where = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
        raise UserError(f"config file not found: {path}{where}", code="config-file-not-found")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise UserError(
            f"{path}: not valid YAML: {str(exc).splitlines()[0]}", code="config-yaml-invalid"
        ) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(
            f"{path}: top level must be a mapping of sections, got {type(data).__name__}; "
            f"known: {', '.join(RunConfig.model_fields)}",
            code="config-not-mapping",
        )
    return data


def _parse_override(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise UserError(
            f"override {text!r}: expected dotted.key=value, e.g. algo.learning_rate=1e-3",
            code="config-override-malformed",
        )
    try:
        value = yaml.safe_load(raw) if raw else ""
    except yaml.YAMLError:
        value = raw
    return key.strip(), value


def _set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    parts = key.split(".")
    node = data
    for depth, part in enumerate(parts[:-1], 1):
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            held = ".".join(parts[:depth])
            raise UserError(
                f"override {key}: {part} is not a section; {held} holds a value: set {held}=VALUE",
                code="config-override-not-section",
            )
        node = child
    node[parts[-1]] = value


def _unknown_keys(data: Any, model: type[BaseModel], prefix: str, algorithm_name: str) -> list[str]:
    """A line for every key the schema of ``algorithm_name``'s runs does not know, suggesting the
    closest valid one."""
    if not isinstance(data, dict):
        return []
    fields = model.model_fields
    problems = []
    for key, value in data.items():
        if key not in fields:
            where = f"{prefix}{key}"
            owners = [name for name, known in ALGORITHMS.items() if _declares(known.config, where)]
            if owners:
                problems.append(
                    f"{where}: only a run of algo.name={' or '.join(owners)} reads it; remove it from "
                    f"this one (algo.name={algorithm_name})"
                )
                continue
            problems.append(
                _foreign_group_key(model, str(key), algorithm_name) or _unknown_key(prefix, str(key), fields)
            )
            continue
        annotation = fields[key].annotation
        if issubclass(model, RunConfig) and key == "algo":
            annotation = algorithm(algorithm_name).config
        if issubclass(model, RunConfig) and key == "workers":
            annotation = workers_config(algorithm_name)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            problems += _unknown_keys(value, annotation, f"{prefix}{key}.", algorithm_name)
    return problems


def _declares(section: type[AlgorithmSection], dotted: str) -> bool:
    """``dotted`` is a key only ``section``'s algorithm brings: a section of its own, or a key
    its extension of a shared section adds."""
    key, _, rest = dotted.partition(".")
    brought = section.sections.get(key)
    if brought is None:
        return False
    shared = RunConfig.model_fields.get(key)
    if not rest:
        return shared is None
    first = rest.split(".")[0]
    return first in brought.model_fields and (shared is None or first not in shared.annotation.model_fields)


def _without_defaults_of_other_algorithms(data: dict[str, Any], run_class: type[RunConfig]) -> dict[str, Any]:
    """``data`` without the sections (and keys) other algorithms bring where they hold those
    sections' defaults: configs distrl saved before algorithms brought their own sections (in
    checkpoints) hold them for every run."""
    data = dict(data)
    for other in ALGORITHMS.values():
        for key, section in other.config.sections.items():
            defaults = section().model_dump(mode="json")
            if key not in run_class.model_fields:
                if data.get(key) == defaults:
                    del data[key]
                continue
            shared = run_class.model_fields[key].annotation
            if isinstance(data.get(key), dict) and isinstance(shared, type) and issubclass(shared, BaseModel):
                extra = set(section.model_fields) - set(shared.model_fields)
                data[key] = {k: v for k, v in data[key].items() if not (k in extra and v == defaults[k])}
    return data


def _unknown_key(prefix: str, key: str, fields: dict[str, Any]) -> str:
    close = difflib.get_close_matches(key, list(fields), n=1)
    hint = f"; did you mean {prefix}{close[0]}?" if close else ""
    return f"unknown config key {prefix}{key}{hint} (allowed here: {', '.join(fields)})"


def _foreign_group_key(model: type[BaseModel], key: str, algorithm_name: str) -> str | None:
    """The line for a key of a worker group that another algorithm has and this run's lacks;
    None for any other key."""
    if not issubclass(model, WorkersSection):
        return None
    owners = {
        group: name
        for name in ALGORITHMS
        for group in workers_config(name).group_names()
        if key in group_keys(group)
    }
    if not owners:
        return None
    group, owner = next(iter(owners.items()))
    return (
        f"workers.{key}: algo.name={algorithm_name} has no {group} workers (algo.name={owner} has); "
        f"its worker groups beside the learners: {', '.join(model.group_names())}"
    )


def _read_replaced_groups(data: dict[str, Any], algorithm_name: str, source: str) -> dict[str, Any]:
    """``data`` with the keys of a generic worker group that the algorithm replaces by one of its
    own (GRPO's ``workers.env``: its verifiers) moved to that group's, each group said in one
    warning line naming its new keys."""
    workers = data.get("workers")
    if not isinstance(workers, dict):
        return data
    workers = dict(workers)
    for group in algorithm(algorithm_name).worker_groups:
        if group.replaces is None:
            continue
        keys = zip(group_keys(group.replaces), group_keys(group.name), strict=True)
        moved = {old: new for old, new in keys if old in workers}
        for old, new in moved.items():
            if new in workers:
                raise UserError(
                    f"{source}: workers.{old} and workers.{new} both size the {group.name} workers of "
                    f"algo.name={algorithm_name}: give workers.{new} only",
                    code="config-workers-old-and-new-key",
                )
            workers[new] = workers.pop(old)
        if moved:
            olds, news = (", ".join(f"workers.{key}" for key in side) for side in (moved, moved.values()))
            verb = "is" if len(moved) == 1 else "are"
            print(
                f"distrl: warning: {source}: {olds} for algo.name={algorithm_name} {verb} its {group.name} "
                f"workers: use {news}",
                file=sys.stderr,
            )
    return {**data, "workers": workers}


def _move_deprecated_keys(data: dict[str, Any], source: str) -> dict[str, Any]:
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for old, new in MOVED_KEYS.items():
        old_section, key = old.split(".")
        new_section = new.split(".")[0]
        if isinstance(data.get(old_section), dict) and key in data[old_section]:
            value = data[old_section].pop(key)
            data.setdefault(new_section, {}).setdefault(key, value)
            print(f"distrl: warning: {source}: {old} is deprecated; it is now {new}", file=sys.stderr)
    return data
