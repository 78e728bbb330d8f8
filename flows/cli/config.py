"""`coevo config show | schema`: a run config as the run will see it, and the reference of every field.

    coevo config show deploy/configs/micro_study.yaml              # the file with its `extends:` chain merged
    coevo config show --resolved deploy/configs/micro_study.yaml   # ... and every default filled in
    coevo config schema > docs/configuration.md                    # every field: path, type, default, description

The schema is read from the pydantic records (`flows.config.RunConfig` and the records it nests), so the page
cannot drift from the code; tests/test_flows_config.py fails when the checked-in page differs.
"""

from __future__ import annotations

import json
import re
import types
from pathlib import Path
from typing import Annotated, Any, Literal, NamedTuple, Union, get_args, get_origin

import typer
import yaml
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import to_jsonable_python

from flows.cli.options import fail
from flows.config import ConfigError, RunConfig, load_config, read_config_data, resolved

REGENERATE = ".venv/bin/coevo config schema > docs/configuration.md"
INTRO = f"""# Configuration reference

<!-- Generated from the pydantic records by `{REGENERATE}`;
tests/test_flows_config.py fails when this page differs from what the code generates.
Edit a field's `description` in the code, then regenerate. -->

A run config is one YAML file (`coevo run --config FILE`); the shipped ones are in `deploy/configs/`. A file states
only what differs from the defaults below, and may start from another file: `extends: local.yaml` (a path relative
to the extending file) overlays this file on that base by deep merge. Mappings merge key by key, while lists,
scalars and `null` replace the base's value (so `round: null` turns a round config into one that evaluates its
`evaluation.pairs`, and a `servers:` list is restated whole). A base may itself extend another; a cycle is refused. The merged result is
validated once, after the merge: an unknown key or a bad value is an error naming its dotted key and the files
involved. `coevo config show --resolved FILE` prints the merged config with every default filled in: what a run
stores as `runs/<run_id>/config.yaml` (a resumed run reads that copy, not the files). `coevo config show FILE`
prints the merged file without the defaults. Every run is rounds of the stages `round.stages` names; a config
without `round:` is the round [evaluate_pairs, attribute, report].
Besides the per-field checks below, the run checks cross-references (every role, pair, server and adapter a field
names must exist) and, before anything starts, the files and machine (`coevo run --dry-run`, `coevo doctor`).
"""

config_app = typer.Typer(help="Run configs: show one merged and resolved, or list every field (the schema).",
                         no_args_is_help=True)


class Row(NamedTuple):
    """One field of the schema: its dotted path (`[]` marks a list item, `<name>` a mapping key)."""

    path: str
    type: str
    default: str
    description: str


class Section(NamedTuple):
    path: str
    intro: str
    rows: list[Row]


@config_app.command("show")
def show(
    file: Annotated[Path, typer.Argument(help="Run config YAML (its `extends:` chain is followed).")],
    resolved_: Annotated[bool, typer.Option("--resolved", help="Fill in every default: the config as a run "
                                                               "stores it in runs/<run_id>/config.yaml.")] = False,
) -> None:
    """Print a run config as YAML after merging its `extends:` chain; it is validated first (an error names the
    key). With --resolved every default is filled in too."""
    try:
        config = load_config(file)  # validated first, so an invalid file is an error naming its key
        data = resolved(config) if resolved_ else read_config_data(file)
    except ConfigError as e:
        fail(f"config error: {e}")
    typer.echo(yaml.dump(data, Dumper=_NoAliases, sort_keys=False, allow_unicode=True, width=120), nl=False)


@config_app.command("schema")
def schema() -> None:
    """Print the reference of every run-config field as markdown (one table per section: dotted path, type,
    default, description), read from the pydantic records. docs/configuration.md is this output."""
    typer.echo(schema_markdown(), nl=False)


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def schema_markdown() -> str:
    """docs/configuration.md: the intro, then one table per section."""
    parts = [INTRO]
    for s in sections():
        title = f"`{s.path}`" if s.path else "Top level"
        head = "| key | type | default | description |\n|---|---|---|---|"
        lines = [f"| `{r.path}` | {_cell(r.type)} | {_default_cell(r.default)} | {_cell(r.description)} |"
                 for r in s.rows]
        parts.append("\n".join([f"## {title}", "", *([_cell(s.intro), ""] if s.intro else []), head, *lines]) + "\n")
    return "\n".join(parts)


def sections(model: type[BaseModel] = RunConfig, path: str = "", intro: str = "") -> list[Section]:
    """The schema of `model` under `path`: its own fields as rows, each nested record as a section of its own."""
    own: list[Row] = []
    nested: list[Section] = []
    for name, info in model.model_fields.items():
        dotted = f"{path}.{name}" if path else name
        record, suffix = _record_in(info.annotation)
        if record is None or suffix:  # a record's container (a list, a mapping) keeps a row for its default
            own.append(Row(dotted, _type_text(info), _default_text(info), info.description or ""))
        if record is not None:
            nested += sections(record, dotted + suffix, _section_intro(info, record, bool(suffix)))
    return [Section(path, intro, own), *nested]


def rows() -> list[Row]:
    """Every field of every section, in page order."""
    return [r for s in sections() for r in s.rows]


def _record_in(annotation: Any) -> tuple[type[BaseModel] | None, str]:
    """(the record a field holds, the path suffix of one item): (X, '') for X or X | None, (X, '[]') for list[X],
    (X, '.<name>') for dict[str, X]; (None, '') for anything else."""
    args = [a for a in get_args(annotation) if a is not type(None)]
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType) and len(args) == 1:
        return _record_in(args[0])
    if origin is list and args and _is_record(args[0]):
        return args[0], "[]"
    if origin is dict and len(args) == 2 and _is_record(args[1]):
        return args[1], ".<name>"
    return (annotation, "") if _is_record(annotation) else (None, "")


def _is_record(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, BaseModel)


def _section_intro(info: FieldInfo, record: type[BaseModel], container: bool) -> str:
    doc = " ".join((record.__doc__ or "").split("\n\n")[0].split())
    if container:  # the container's own row (type, default, description) is in the parent table
        return f"Each entry is one `{record.__name__}` record." + (f" {doc}" if doc else "")
    head = f"{_type_text(info)}; default: {'its fields below' if info.default is not None else 'null'}."
    return " ".join(p for p in (head, info.description or doc) if p)  # the field's own words, else the record's


_BOUNDS = (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<="))


def _type_text(info: FieldInfo) -> str:
    bounds = [f"{sym} {getattr(m, attr)}" for m in info.metadata for attr, sym in _BOUNDS if hasattr(m, attr)]
    return ", ".join([_type_name(info.annotation), *bounds])


def _type_name(tp: Any) -> str:
    if tp is type(None):
        return "null"
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        return _type_name(args[0])
    if origin is Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in (Union, types.UnionType):
        return " | ".join(_type_name(a) for a in args)
    if origin in (list, tuple, dict):
        return f"{origin.__name__}[{', '.join('...' if a is Ellipsis else _type_name(a) for a in args)}]"
    return "any" if tp is Any else getattr(tp, "__name__", str(tp))


def _default_text(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    return json.dumps(_plain(info.get_default(call_default_factory=True)))


def _plain(value: Any) -> Any:
    """JSON for a default; a record shows only what differs from its own defaults (e.g. {"model": "student"})."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json", exclude_defaults=True)
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return to_jsonable_python(value)


def _cell(text: str) -> str:
    """Markdown table text: `|` would end the cell, and `<name>` outside a code span would read as an HTML tag."""
    parts = text.replace("\n", " ").replace("|", "\\|").split("`")
    return "`".join(p if i % 2 else re.sub(r"<(?=[A-Za-z/!?])", r"\\<", p) for i, p in enumerate(parts))


def _default_cell(text: str) -> str:
    return text if text == "required" else f"`{_cell(text)}`"


def register(app: typer.Typer) -> None:
    app.add_typer(config_app, name="config")
