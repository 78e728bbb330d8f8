"""Tools declared once: a method's signature and docstring are the schema the model sees.

`@tool` marks an `Environment` method as a tool. Its parameters (type-hinted) become the JSON schema, the
first docstring paragraph the description, and `Args:` lines the parameter descriptions. Arguments are
validated with a pydantic model built from the same signature (`extra="forbid"`), so a missing, extra or
wrongly typed argument becomes a clear error message for the model instead of an exception. Sizes are
checked first (`check_sizes`): a string, a list, the nesting depth and the arguments as a whole each have a
cap, so a 2-million-row argument is refused at once, before pydantic or the tool touches it.

Synchronous tools run in a thread pool (`off_loop`), never on the event loop: a slow parse or query of one
episode does not stop the others.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import re
import typing
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from tasks.records import ToolSpec

T = TypeVar("T")

# Untrusted model output: absurd payloads are refused before any tool runs (and before pydantic walks them).
MAX_STRING_ARG_CHARS = 200_000  # one string argument (at any depth)
MAX_LIST_ITEMS = 1_000  # items of one list (or keys of one object) at any depth; `@tool(max_list_items=N)` overrides
MAX_ARGUMENT_CHARS = 400_000  # all arguments together, as JSON text (counted while walking, stopped at the cap)
MAX_ARGUMENT_DEPTH = 32  # lists and objects nested inside one argument
MAX_ARGUMENTS_JSON_CHARS = 6 * MAX_ARGUMENT_CHARS  # arguments as JSON text, before parsing (escapes inflate text)
_TOOL_THREADS = 64  # threads that run synchronous tools and blocking sandbox calls off the event loop


class ToolError(Exception):
    """Raised inside a tool for a problem the model can fix; becomes ToolResult(is_error=True)."""


def tool(fn: Callable[..., Any] | None = None, *, max_list_items: int | None = None) -> Any:
    """Mark a method as a tool: `@tool`, or `@tool(max_list_items=N)` to change the list cap for this tool."""

    def mark(f: Callable[..., Any]) -> Callable[..., Any]:
        f.__coevo_tool__ = True  # type: ignore[attr-defined]
        if max_list_items is not None:
            f.__coevo_max_list_items__ = max_list_items  # type: ignore[attr-defined]
        return f

    return mark(fn) if fn is not None else mark


@functools.cache
def _tool_pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=_TOOL_THREADS, thread_name_prefix="coevo-tool")


async def off_loop(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run a blocking function (a synchronous tool, a sandboxed command) in the tools' thread pool, so the
    event loop, and every other episode on it, keeps running. Cancelling the await leaves the function to
    finish on its own (each blocking call has its own limit: the sandbox's wall clock, the SQL budget)."""
    ctx = contextvars.copy_context()
    return await asyncio.get_running_loop().run_in_executor(_tool_pool(), functools.partial(ctx.run, fn, *args, **kwargs))


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


def check_sizes(arguments: dict[str, Any], max_items: int = MAX_LIST_ITEMS) -> None:
    """Refuse oversized arguments at once: a string, a list, the nesting or the whole, with the cap named.

    The walk stops at the first cap passed, so its cost is bounded by the caps, not by the payload."""
    budget = MAX_ARGUMENT_CHARS
    stack: list[tuple[str, Any, int]] = [(name, value, 0) for name, value in arguments.items()]
    while stack:
        where, value, depth = stack.pop()
        if isinstance(value, str):
            if len(value) > MAX_STRING_ARG_CHARS:
                raise ToolError(f"argument '{where}' is {len(value)} characters; the limit is {MAX_STRING_ARG_CHARS}")
            budget -= len(value) + 3
        elif isinstance(value, (list, tuple, dict)):
            if depth >= MAX_ARGUMENT_DEPTH:
                raise ToolError(f"argument '{where[:60]}...' is nested more than {MAX_ARGUMENT_DEPTH} levels deep")
            if len(value) > max_items:
                raise ToolError(f"argument '{where}' has {len(value)} items; the limit is {max_items} "
                                "(send fewer per call)")
            items = value.items() if isinstance(value, dict) else enumerate(value)
            for k, v in items:
                budget -= len(str(k)) + 4 if isinstance(value, dict) else 2
                stack.append((f"{where}.{str(k)[:40]}" if isinstance(value, dict) else f"{where}[{k}]", v, depth + 1))
        else:
            budget -= 24  # a number, true/false or null
        if budget < 0:
            raise ToolError(f"the arguments are larger than {MAX_ARGUMENT_CHARS} characters in all; send less per call")


def validate_arguments(fn: Callable[..., Any], arguments: dict[str, Any]) -> dict[str, Any]:
    """Return validated keyword arguments or raise ToolError naming the offending argument."""
    check_sizes(arguments, getattr(fn, "__coevo_max_list_items__", MAX_LIST_ITEMS))
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
