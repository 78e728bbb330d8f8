"""Tools declared once: a method's signature and docstring are the schema the model sees.

`@tool` marks an `Environment` method as a tool. Its parameters (type-hinted) become the JSON schema, the
first docstring paragraph the description, and `Args:` lines the parameter descriptions. Arguments are
validated with a pydantic model built from the same signature (`extra="forbid"`), so a missing, extra or
wrongly typed argument becomes a clear error message for the model instead of an exception.
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from tasks.records import ToolSpec

MAX_STRING_ARG_CHARS = 200_000  # untrusted model output: refuse absurd payloads before any tool runs


class ToolError(Exception):
    """Raised inside a tool for a problem the model can fix; becomes ToolResult(is_error=True)."""


def tool(fn: Callable[..., Any]) -> Callable[..., Any]:
    fn.__coevo_tool__ = True  # type: ignore[attr-defined]
    return fn


def is_tool(obj: Any) -> bool:
    return callable(obj) and getattr(obj, "__coevo_tool__", False)


def _doc_parts(fn: Callable[..., Any]) -> tuple[str, dict[str, str]]:
    doc = inspect.getdoc(fn) or ""
    head, _, rest = doc.partition("Args:")
    description = " ".join(head.split())
    params: dict[str, str] = {}
    current = None
    for line in rest.splitlines():
        m = re.match(r"\s*(\w+)\s*(?:\([^)]*\))?:\s*(.*)", line)
        if m:
            current = m.group(1)
            params[current] = m.group(2).strip()
        elif current and line.strip():
            params[current] += " " + line.strip()
    return description, params


def _signature_params(fn: Callable[..., Any]) -> list[tuple[str, Any, Any]]:
    hints = typing.get_type_hints(fn)
    out = []
    for name, p in inspect.signature(fn).parameters.items():
        if name == "self":
            continue
        out.append((name, hints.get(name, Any), p.default))
    return out


class _ArgsBase(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=False)


def args_model(fn: Callable[..., Any]) -> type[BaseModel]:
    # Keyed on the plain function: caching bound methods would keep every Environment alive.
    return _args_model(getattr(fn, "__func__", fn))


@functools.cache
def _args_model(fn: Callable[..., Any]) -> type[BaseModel]:
    fields: dict[str, Any] = {}
    for name, hint, default in _signature_params(fn):
        fields[name] = (hint, ... if default is inspect.Parameter.empty else default)
    return create_model(f"{fn.__name__}_args", __base__=_ArgsBase, **fields)


def spec_for(fn: Callable[..., Any], name: str | None = None) -> ToolSpec:
    # Cached on the plain function (as args_model): every episode asks for the same specs, and building
    # a JSON schema is a few ms per environment. ToolSpec is frozen, so sharing it is safe.
    return _spec_for(getattr(fn, "__func__", fn), name)


@functools.cache
def _spec_for(fn: Callable[..., Any], name: str | None) -> ToolSpec:
    description, param_docs = _doc_parts(fn)
    schema = args_model(fn).model_json_schema()
    props = {}
    for pname, prop in schema.get("properties", {}).items():
        prop = {k: v for k, v in prop.items() if k != "title"}
        if pname in param_docs:
            prop["description"] = param_docs[pname]
        props[pname] = prop
    parameters: dict[str, Any] = {"type": "object", "properties": props, "required": schema.get("required", [])}
    if "$defs" in schema:
        parameters["$defs"] = schema["$defs"]
    return ToolSpec(name=name or fn.__name__, description=description, parameters=parameters)


def validate_arguments(fn: Callable[..., Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """Return validated keyword arguments or raise ToolError naming the offending argument."""
    for key, value in arguments.items():
        if isinstance(value, str) and len(value) > MAX_STRING_ARG_CHARS:
            raise ToolError(f"argument '{key}' is {len(value)} characters; the limit is {MAX_STRING_ARG_CHARS}")
    try:
        validated = args_model(fn).model_validate(arguments)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            loc = ".".join(str(x) for x in err["loc"]) or "(arguments)"
            kind = err["type"]
            if kind == "missing":
                problems.append(f"missing required argument '{loc}'")
            elif kind == "extra_forbidden":
                problems.append(f"unknown argument '{loc}'")
            else:
                problems.append(f"argument '{loc}': {err['msg']}")
        raise ToolError("; ".join(problems)) from None
    return {k: getattr(validated, k) for k in validated.model_fields}
