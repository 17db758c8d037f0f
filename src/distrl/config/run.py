"""The whole run's config: the component sections (``distrl.config.sections``) and the chosen
algorithm's own section (``distrl.algos.registry``), read from a YAML file with dotted
command-line overrides and validated by pydantic. Every problem found is reported, each on a
line of its own that names the key."""

from __future__ import annotations

import difflib
import sys
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, SerializeAsAny, ValidationError, field_validator, model_validator

from distrl.algos.registry import Algorithm, algorithm
from distrl.config.algorithm import AlgorithmSection
from distrl.config.base import Section
from distrl.config.grpo_vocabulary import translate_grpo_section
from distrl.config.sections import (
    CheckpointConfig,
    ClusterConfig,
    CommConfig,
    DataConfig,
    EnvConfig,
    EvalConfig,
    LogConfig,
    ModelConfig,
    NormalizeConfig,
    OutputConfig,
    TaskConfig,
    TrainConfig,
    WorkersConfig,
)
from distrl.errors import UserError

AlgorithmConfig = SerializeAsAny[AlgorithmSection]
"""Any algorithm's section, its class chosen by ``name`` (``RunConfig._algorithm_section``) and
written out whole."""


class RunConfig(Section):
    ml_framework: Literal["torch", "jax"] = "torch"
    """The learner's framework: ``jax`` trains PPO with JAX, Flax and Optax (the ``jax`` extra;
    several processes through ``python -m distrl.launch.jax``); configs, run dirs and checkpoints
    are the same as torch's."""
    env: EnvConfig = Field(default_factory=EnvConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    algo: AlgorithmConfig = Field(default_factory=lambda: algorithm("ppo").config())
    """The algorithm's own section, chosen by ``algo.name`` (``algos.registry``; ppo when unset)."""
    task: TaskConfig = Field(default_factory=TaskConfig)
    """What a sequence policy learns (GRPO): prompts and reward functions, instead of ``env``."""
    normalize: NormalizeConfig = Field(default_factory=NormalizeConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    comm: CommConfig = Field(default_factory=CommConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)
    log: LogConfig = Field(default_factory=LogConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    workers: WorkersConfig = Field(default_factory=WorkersConfig)

    @property
    def algorithm(self) -> Algorithm:
        """What ``algo.name`` declares (``algos.registry``), looked up as ``algo`` was: how code
        the registry names (a collector, a runner) reads its algorithm's other declarations
        without importing the registry, which names it."""
        return algorithm(self.algo.name)

    @model_validator(mode="before")
    @classmethod
    def _worker_totals(cls, data: Any) -> Any:
        """``workers.<group>_per_node`` x ``cluster.num_nodes`` is the group's total."""
        if not isinstance(data, dict) or not isinstance(data.get("workers"), dict):
            return data
        workers = dict(data["workers"])
        cluster = data.get("cluster")
        nodes = cluster.get("num_nodes", 1) if isinstance(cluster, dict) else 1
        for group in WorkersConfig.groups():
            key = f"{group}_per_node"
            per_node = workers.get(key)
            if per_node is None:
                continue
            if group in workers:
                raise UserError(f"workers.{group} and workers.{key} exclude each other: give one")
            # Anything but whole numbers is left for the fields' own checks to name.
            if isinstance(per_node, int) and isinstance(nodes, int):
                workers[group] = per_node * nodes
                del workers[key]
        return {**data, "workers": workers}

    @field_validator("algo", mode="before")
    @classmethod
    def _algorithm_section(cls, value: Any) -> Any:
        """A mapping becomes the section of the algorithm it names (ppo when unnamed)."""
        return algorithm_section(value) if isinstance(value, dict) else value


def algorithm_section(data: dict[str, Any]) -> AlgorithmSection:
    """``algo:`` validated as the section of the algorithm it names (ppo when unnamed)."""
    named = {**data, "name": data.get("name", "ppo")}
    return algorithm(str(named["name"])).config.model_validate(named)


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
    _check_switches_honoured(cfg, source)
    return cfg


TRAIN_SWITCHES = ("compile", "activation_checkpointing", "gradient_accumulation_steps", "optimizer_offload")
"""``train`` keys an algorithm must honour to be given them (``honoured_train_switches``) unless
they are at their defaults."""


def _check_switches_honoured(cfg: RunConfig, source: str) -> None:
    """Said rather than silently ignored: a user who asks for compilation (or checkpointing)
    expects it to happen.
    Checked on what the user gives, not on configs saved in checkpoints before this rule."""
    if cfg.train.compile and cfg.ml_framework == "jax":
        raise UserError(
            f"{source}: train.compile=true is for torch learners; JAX learners are always compiled: "
            "set train.compile=false"
        )
    for switch in TRAIN_SWITCHES:
        value, default = getattr(cfg.train, switch), TrainConfig.model_fields[switch].default
        if value != default and switch not in cfg.algo.honoured_train_switches:
            shown = str(value).lower() if isinstance(value, bool) else value
            raise UserError(
                f"{source}: train.{switch}={shown} is not supported by algo.name={cfg.algo.name}; "
                f"leave it at {str(default).lower() if isinstance(default, bool) else default}"
            )


MOVED_KEYS = {f"train.{key}": f"comm.{key}" for key in ("timeout_s", "network_interface", "sync_spin_ms")}
"""Keys that moved to another section: still read from the old place, with a warning."""


def config_from_dict(data: dict[str, Any], source: str = "config") -> RunConfig:
    """Validate a plain dict; every problem is a line of the ``UserError``, naming its key."""
    data = translate_grpo_section(_move_deprecated_keys(data, source), source)
    problems = _unknown_keys(data, RunConfig, prefix="")
    if problems:
        raise UserError("\n".join(problems))
    errors: list[Any] = []
    algo = data.get("algo", {})
    if isinstance(algo, dict):  # validated apart, so an algorithm from outside has its own class
        try:
            data = {**data, "algo": algorithm_section(algo)}
        except ValidationError as exc:
            errors += [{**err, "loc": ("algo", *err["loc"])} for err in exc.errors()]
            data = {key: value for key, value in data.items() if key != "algo"}
    try:
        cfg = RunConfig.model_validate(data)
    except ValidationError as exc:
        errors += exc.errors()
    if errors:  # in the order of the config's sections
        order = {section: index for index, section in enumerate(RunConfig.model_fields)}
        errors.sort(key=lambda err: order.get(err["loc"][0], -1) if err["loc"] else -1)
        raise UserError("\n".join(_problem(source, err) for err in errors)) from None
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
        raise UserError(f"config file not found: {path}{where}")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise UserError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UserError(
            f"{path}: top level must be a mapping of sections, got {type(data).__name__}; "
            f"known: {', '.join(RunConfig.model_fields)}"
        )
    return data


def _parse_override(text: str) -> tuple[str, Any]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise UserError(f"override {text!r}: expected dotted.key=value, e.g. algo.learning_rate=1e-3")
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
                f"override {key}: {part} is not a section; {held} holds a value: set {held}=VALUE"
            )
        node = child
    node[parts[-1]] = value


def _unknown_keys(data: Any, model: type[BaseModel], prefix: str) -> list[str]:
    """A line for every key the schema does not know, suggesting the closest valid one."""
    if not isinstance(data, dict):
        return []
    fields = model.model_fields
    problems = []
    for key, value in data.items():
        if key not in fields:
            where = f"{prefix}{key}"
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f"; did you mean {prefix}{close[0]}?" if close else ""
            problems.append(f"unknown config key {where}{hint} (allowed here: {', '.join(fields)})")
            continue
        annotation = fields[key].annotation
        if model is RunConfig and key == "algo":
            annotation = algorithm(value.get("name", "ppo") if isinstance(value, dict) else "ppo").config
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            problems += _unknown_keys(value, annotation, prefix=f"{prefix}{key}.")
    return problems


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
