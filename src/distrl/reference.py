"""The documentation's generated reference pages: every config key from the pydantic models (its
type, default and docstring) and every subcommand's help from the argument parser. The pages in
``docs/reference/`` are this module's output; a test fails when they differ, so the reference
cannot drift from the code. ``python -m distrl.reference docs/reference`` rewrites them."""

from __future__ import annotations

import argparse
import inspect
import json
import sys
import types
import typing
from collections.abc import Iterator
from dataclasses import astuple
from itertools import cycle
from pathlib import Path
from typing import Any

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

BOUNDS = {
    annotated_types.Gt: ">",
    annotated_types.Ge: ">=",
    annotated_types.Lt: "<",
    annotated_types.Le: "<=",
}


def type_name(annotation: Any, metadata: list[Any] = ()) -> str:
    """A type as a user writes its values: ``int > 0``, ``"tanh" | "relu"``, ``list[int > 0]``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return type_name(args[0], [*metadata, *args[1:]])
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if origin in (list, dict, tuple):
        return f"{origin.__name__}[{', '.join(type_name(a) for a in args)}]"
    name = "null" if annotation is type(None) else getattr(annotation, "__name__", str(annotation))
    bounds = [f"{op} {astuple(m)[0]}" for m in metadata for cls, op in BOUNDS.items() if isinstance(m, cls)]
    return ", ".join([" ".join([name, *bounds[:1]]), *bounds[1:]])


def default_text(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if isinstance(value, BaseModel):
        return "(section)"
    return json.dumps(value, default=str)


def section_of(field: FieldInfo) -> type[BaseModel] | None:
    annotation = field.annotation
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def one_line(text: str | None) -> str:
    """A docstring as one table cell: RST's double backticks as Markdown's single, and pipes
    escaped outside code spans (inside them the table reads them as text)."""
    parts = " ".join((text or "").split()).replace("``", "`").split("`")
    return "`".join(
        part if inside else part.replace("|", "\\|") for inside, part in zip(cycle((False, True)), parts)
    )


def config_sections() -> Iterator[tuple[str, type[BaseModel], str, set[str]]]:
    """(dotted name, model, description, keys documented elsewhere) of every section: the
    algorithm's once per algorithm, its worker groups' once per set of groups, and after the
    shared ones the sections each algorithm brings (of an extended shared section, only the keys
    it adds)."""
    from distrl.algos.registry import ALGORITHMS
    from distrl.config.run import RunConfig, workers_config
    from distrl.config.sections import WorkersSection

    yield "", RunConfig, "Keys at the top level of a config.", set()

    def walk(prefix: str, model: type[BaseModel]) -> Iterator[tuple[str, type[BaseModel], str, set[str]]]:
        for name, field in model.model_fields.items():
            section = section_of(field)
            if section is not None:
                description = field.description or inspect.getdoc(section) or ""
                yield f"{prefix}{name}", section, description, set()
                yield from walk(f"{prefix}{name}.", section)

    for name, section, description, shared in walk("", RunConfig):
        yield name, section, description, shared
        if name == "env":  # the algorithm's section follows the env's, one per algorithm
            for known in ALGORITHMS.values():
                doc = inspect.getdoc(known.config) or ""
                yield f"algo (algo.name: {known.name})", known.config, doc, set()
        if name == "workers":  # the worker groups' keys follow the learners', one per set of groups
            by_section: dict[type[BaseModel], list[str]] = {}
            for known in ALGORITHMS:
                by_section.setdefault(workers_config(known), []).append(known)
            learners = set(WorkersSection.model_fields)
            for workers, algorithms in by_section.items():
                doc = inspect.getdoc(workers) or ""
                yield f"workers (algo.name: {', '.join(algorithms)})", workers, doc, learners
    for known in ALGORITHMS.values():
        for key, brought in known.config.sections.items():
            extended = RunConfig.model_fields.get(key)
            documented = set(section_of(extended).model_fields) if extended is not None else set()
            heading = f"{key} (algo.name: {known.name})"
            yield heading, brought, inspect.getdoc(brought) or "", documented
            for name, section, description, shared in walk(f"{key}.", brought):
                if name.split(".")[1] not in documented:
                    yield f"{name} (algo.name: {known.name})", section, description, shared


def leaf_fields(
    model: type[BaseModel], documented: set[str] = frozenset()
) -> Iterator[tuple[str, FieldInfo]]:
    """The keys of ``model`` that hold values (not sections), but those ``documented`` elsewhere."""
    from distrl.config.run import RunConfig

    for name, field in model.model_fields.items():
        if name in documented or (model is RunConfig and name == "algo"):
            continue
        if section_of(field) is None:
            yield name, field


def undocumented() -> list[str]:
    """Config keys and sections without a description (a test keeps this empty)."""
    missing = []
    for name, model, description, documented in config_sections():
        if name and not description:
            missing.append(name)
        prefix = name.split(" ")[0] + "." if name else ""
        missing += [
            f"{prefix}{key}" for key, field in leaf_fields(model, documented) if not field.description
        ]
    return missing


def configuration_page() -> str:
    lines = [
        "# Configuration reference",
        "",
        "<!-- Generated by `python -m distrl.reference docs/reference` from the config's pydantic",
        "models; tests/test_reference.py fails when this page is out of date. Do not edit. -->",
        "",
        "A config is a YAML file of these sections; any key can also be set on the command line as",
        "`section.key=value` (`distrl train --config configs/cartpole_ppo.yaml algo.learning_rate=1e-3`).",
        "Unknown keys and wrong types are errors naming the key. `distrl config CONFIG` prints a",
        "config with every default filled in and the sizes each rank gets.",
        "",
    ]
    for name, model, description, documented in config_sections():
        rows = list(leaf_fields(model, documented))
        if not rows:
            continue
        prefix = name.split(" ")[0] + "." if name else ""
        lines += [f"## {name or 'Top level'}", "", one_line(description), ""]
        lines += ["| key | type | default | description |", "| --- | --- | --- | --- |"]
        for key, field in rows:
            kind = type_name(field.annotation, field.metadata)
            lines.append(
                f"| `{prefix}{key}` | `{kind}` | `{default_text(field)}` | {one_line(field.description)} |"
            )
        lines.append("")
    return "\n".join(lines)


def cli_page() -> str:
    from distrl.cli import SUBCOMMANDS, build_parser

    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    lines = [
        "# Command-line reference",
        "",
        "<!-- Generated by `python -m distrl.reference docs/reference` from distrl's argument parser;",
        "tests/test_reference.py fails when this page is out of date. Do not edit. -->",
        "",
        "Every subcommand's `--help` prints the same text.",
        "",
        "```text",
        _help_text(parser),
        "```",
        "",
    ]
    for name in SUBCOMMANDS:
        lines += [f"## distrl {name}", "", "```text", _help_text(subparsers.choices[name]), "```", ""]
    return "\n".join(lines)


def _help_text(parser: argparse.ArgumentParser) -> str:
    """Help as a wide terminal shows it, so the page does not depend on the reader's terminal."""
    formatter = parser.formatter_class
    parser.formatter_class = lambda prog: formatter(prog, width=100)
    try:
        return parser.format_help().rstrip()
    finally:
        parser.formatter_class = formatter


PAGES = {"configuration.md": configuration_page, "cli.md": cli_page}
"""File name in ``docs/reference/`` -> the function that writes it."""


def write_pages(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for file_name, page in PAGES.items():
        (directory / file_name).write_text(page() + "\n")


if __name__ == "__main__":
    write_pages(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/reference"))
