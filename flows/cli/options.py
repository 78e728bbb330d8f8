"""Typer options generated from pydantic records: a setting is declared once, with its default and help.

    @model_options(config=TrainConfig, length=LengthRule)
    def train(data: Annotated[Path, typer.Option(...)], *, config: TrainConfig, length: LengthRule) -> None: ...

`train` then has one option per field of both records (`--rank`, `--max-len`, ...): the default is the
field's default, the help its `Field(description=...)`, the value is validated by the record itself, and an
invalid one is a usage error naming the option. The command receives the built records under the keywords
given (`config`, `length`). A tuple field (`target_modules`) becomes a repeatable option.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NoReturn, Optional, TypeVar

import typer
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str) -> NoReturn:
    """A bad input: the message on stderr (one line per problem, naming the option or key), exit status 2."""
    typer.echo(f"coevo: error: {message}", err=True)
    raise typer.Exit(2)


def first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:500] if text else type(e).__name__


def existing_path(path: Path, option: str, kind: str = "any") -> Path:
    """`path` exists (and is a file / a directory when `kind` says so), else one line naming the option."""
    if not path.exists():
        fail(f"{option}: {path} does not exist")
    if kind == "file" and not path.is_file():
        fail(f"{option}: {path} is not a file")
    if kind == "dir" and not path.is_dir():
        fail(f"{option}: {path} is not a directory")
    return path


def writable_dir(path: Path, option: str) -> Path:
    """An output directory: absent (it is created) or a directory, never an existing file."""
    if path.exists() and not path.is_dir():
        fail(f"{option}: {path} exists and is not a directory")
    return path


def check_harness(spec: str, option: str = "--harness") -> None:
    """A harness option before any work starts: 'baseline' or a harness YAML/JSON file that loads."""
    if spec == "baseline":
        return
    path = existing_path(Path(spec), option, "file")
    from harness.program import Harness

    try:
        Harness.load(path)
    except (ValueError, OSError, RecursionError) as e:  # bad YAML/JSON, not a harness, unreadable, nested too deep
        fail(f"{option}: {first_line(e) if not isinstance(e, RecursionError) else f'{path}: nested too deeply'}")


def read_trajectory_option(path: Path, option: str) -> list[Any]:  # list[Trajectory]; lazy import: fast CLI start
    """The trajectories of a file or directory given as an option; unreadable or none is one line, exit 2."""
    from agents.tables.trajectories import read_trajectories

    try:
        trajs = read_trajectories(path)
    except Exception as e:  # noqa: BLE001 - not a trajectory table (parquet/arrow/pydantic errors): the input's fault
        fail(f"{option}: {path} is not a trajectory table ({type(e).__name__}: {first_line(e)})")
    if not trajs:
        fail(f"{option}: no trajectories under {path} (expects .parquet files from `coevo rollout` or `coevo run`)")
    return trajs


def option_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def _is_optional(annotation: Any) -> bool:
    return typing.get_origin(annotation) in (typing.Union, types.UnionType) and type(None) in typing.get_args(annotation)


def record_args(record: BaseModel) -> list[str]:
    """The command-line options that give a command declared with `model_options` this record: the inverse
    of the generated options (a launcher running `coevo train` in other processes passes its settings so)."""
    args: list[str] = []
    for name, value in record.model_dump(mode="json").items():
        flag = option_name(name)
        if value is None:
            continue  # an optional field left out is None
        if isinstance(value, bool):
            args.append(flag if value else f"--no-{flag.removeprefix('--')}")
        elif isinstance(value, list):
            for item in value:
                args += [flag, str(item)]
        else:
            args += [flag, str(value)]
    return args


def _option_type(field: FieldInfo) -> tuple[Any, Any]:
    """(annotation typer understands, default) for one field; a tuple field becomes a repeatable list option."""
    annotation, default = field.annotation, field.get_default(call_default_factory=True)
    if typing.get_origin(annotation) is tuple:
        (item, *_) = typing.get_args(annotation)
        return Optional[list[item]], None  # None = the field's default
    if _is_optional(annotation):
        (inner,) = [a for a in typing.get_args(annotation) if a is not type(None)]
        return Optional[inner], default
    return annotation, default


def _help(field: FieldInfo) -> str:
    text = field.description or ""
    if typing.get_origin(field.annotation) is tuple:
        text += f" Repeat for several (default: {', '.join(map(str, field.default))})."
    return text


def _parameters(groups: dict[str, type[BaseModel]], taken: set[str],
                aliases: dict[str, tuple[str, ...]]) -> tuple[list[inspect.Parameter], dict[str, str]]:
    params, owner = [], {}
    for key, model in groups.items():
        for name, field in model.model_fields.items():
            if name in taken or name in owner:
                raise TypeError(f"option {option_name(name)} of {model.__name__} is declared twice")
            owner[name] = key
            annotation, default = _option_type(field)
            flag = option_name(name)
            if annotation is bool:  # a switch: --x/--no-x
                flag = f"{flag}/--no-{flag.removeprefix('--')}"
            decls = (flag, *aliases.get(name, ()))
            option = typer.Option(*decls, help=_help(field))
            kw = {} if field.is_required() else {"default": default}
            params.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY,
                                            annotation=Annotated[annotation, option], **kw))
    return params, owner


def _usage_errors(e: ValidationError, aliases: dict[str, tuple[str, ...]]) -> list[str]:
    """One line per invalid value, naming the option (a check across fields has no single option)."""
    lines = []
    for err in e.errors():
        msg = err["msg"].removeprefix("Value error, ")
        if err["loc"]:
            name = str(err["loc"][0])
            lines.append(f"{(aliases.get(name) or (option_name(name),))[0]}: {msg}")
        else:
            lines.append(msg)
    return lines


def model_options(aliases: dict[str, tuple[str, ...]] | None = None, **groups: type[BaseModel]) -> Callable[[F], F]:
    """Decorate a typer command: add an option per field of each record, pass the records built from them."""
    alias_map = aliases or {}

    def wrap(fn: F) -> F:
        hints = typing.get_type_hints(fn, include_extras=True)
        own = [p.replace(annotation=hints.get(n, p.annotation)) for n, p in inspect.signature(fn).parameters.items()
               if n not in groups]
        extra, owner = _parameters(groups, {p.name for p in own}, alias_map)

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            built, errors = {}, []
            for key, model in groups.items():
                values = {n: kwargs.pop(n) for n, k in owner.items() if k == key}
                # an unset repeatable option arrives as None: the field keeps its own default
                values = {n: v for n, v in values.items() if v is not None or model.model_fields[n].default is None}
                try:
                    built[key] = model(**values)
                except ValidationError as e:
                    errors += _usage_errors(e, alias_map)
            if errors:
                raise typer.BadParameter("; ".join(errors))
            return fn(**kwargs, **built)

        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own] + extra
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command  # type: ignore[return-value]

    return wrap
