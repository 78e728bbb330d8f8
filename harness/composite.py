"""Composite tools: a named sequence of environment calls with argument templates, declared in a harness.

Small models degrade with many tools and with multi-step subroutines; a composite tool turns a subroutine
("list every page of products") into one call. This module is the pure part: the record, its OpenAI schema,
the expansion of one call into the environment calls it stands for, and the edits that add or remove one.
The `composite_tools` field (hashed into the harness id only when non-empty) is on `Harness`
(harness/program.py); `harness/render.py` shows them as tools; `agents/composite_call.py` runs a call for the
rollout runtime (environment calls in order, results joined into one tool message).

Templates: in a step's arguments, a string that is exactly `{name}` takes parameter `name`'s value with its
type; `{name}` inside a longer string is replaced by its text. A step with `repeat` (a count, or the name of
an integer parameter) runs that many times with `{i}` = 1, 2, ... Expansion is bounded (`MAX_CALLS`).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from harness.errors import EditError

MAX_CALLS = 50
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_TYPES: dict[str, tuple[type, ...]] = {"string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,)}


class CompositeError(ValueError):
    """A composite call that cannot expand; the message is written for the model that made the call."""


class Param(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    type: Literal["string", "integer", "number", "boolean"] = "string"
    description: str = ""
    required: bool = True


class CompositeStep(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str = Field(min_length=1, description="The environment tool this step calls.")
    arguments: dict[str, Any] = Field(default_factory=dict, description="JSON arguments; strings may be templates.")
    repeat: int | str | None = Field(default=None, description="Run count, or an integer parameter's name.")


class CompositeTool(BaseModel):
    """One composite tool; `name` is how the model calls it (it must not shadow an environment tool)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    description: str = Field(min_length=1)
    parameters: dict[str, Param] = Field(default_factory=dict)
    steps: list[CompositeStep] = Field(min_length=1)

    @model_validator(mode="after")
    def _templates_name_parameters(self) -> "CompositeTool":
        known = set(self.parameters) | {"i"}
        for n, step in enumerate(self.steps):
            used = set(_placeholders(step.arguments))
            if "i" in used and step.repeat is None:
                raise ValueError(f"composite tool '{self.name}' step {n}: '{{i}}' needs `repeat`")
            unknown = used - known
            if unknown:
                raise ValueError(f"composite tool '{self.name}' step {n}: unknown placeholder(s) {sorted(unknown)}")
            if isinstance(step.repeat, str) and self.parameters.get(step.repeat, Param()).type != "integer":
                raise ValueError(f"composite tool '{self.name}' step {n}: repeat '{step.repeat}' is not an "
                                 "integer parameter")
        return self

    def openai_parameters(self) -> dict[str, Any]:
        """The JSON schema the model sees for this tool's arguments."""
        props = {k: {"type": p.type, **({"description": p.description} if p.description else {})}
                 for k, p in self.parameters.items()}
        return {"type": "object", "properties": props,
                "required": [k for k, p in self.parameters.items() if p.required]}


def _placeholders(value: Any) -> list[str]:
    if isinstance(value, str):
        return _PLACEHOLDER.findall(value)
    if isinstance(value, dict):
        return [p for v in value.values() for p in _placeholders(v)]
    if isinstance(value, list):
        return [p for v in value for p in _placeholders(v)]
    return []


def _fill(value: Any, env: dict[str, Any]) -> Any:
    if isinstance(value, str):
        whole = _PLACEHOLDER.fullmatch(value)
        if whole:
            return env[whole.group(1)]
        return _PLACEHOLDER.sub(lambda m: str(env[m.group(1)]), value)
    if isinstance(value, dict):
        return {k: _fill(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, env) for v in value]
    return value


def check_arguments(tool: CompositeTool, args: dict[str, Any]) -> dict[str, Any]:
    """The call's arguments, validated against the tool's parameters (CompositeError naming the problem)."""
    extra = sorted(set(args) - set(tool.parameters))
    if extra:
        raise CompositeError(f"{tool.name}: unexpected argument(s) {extra}; it takes {sorted(tool.parameters)}")
    out: dict[str, Any] = {}
    for name, p in tool.parameters.items():
        if name not in args:
            if p.required:
                raise CompositeError(f"{tool.name}: missing required argument '{name}'")
            continue
        v = args[name]
        if not isinstance(v, _TYPES[p.type]) or (p.type != "boolean" and isinstance(v, bool)):
            raise CompositeError(f"{tool.name}: argument '{name}' must be a {p.type}, got {type(v).__name__}")
        out[name] = v
    return out


def expand(tool: CompositeTool, args: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The environment calls `(tool name, arguments)` one composite call stands for, in order."""
    env = check_arguments(tool, args)
    calls: list[tuple[str, dict[str, Any]]] = []
    for n, step in enumerate(tool.steps):
        used = set(_placeholders(step.arguments)) - {"i"}
        missing = sorted(u for u in used if u not in env)
        if missing:
            raise CompositeError(f"{tool.name}: step {n} needs argument(s) {missing}")
        times = 1 if step.repeat is None else (step.repeat if isinstance(step.repeat, int) else env.get(step.repeat))
        if not isinstance(times, int) or times < 0:
            raise CompositeError(f"{tool.name}: step {n} repeat count must be a non-negative integer")
        if len(calls) + times > MAX_CALLS:
            raise CompositeError(f"{tool.name}: expands to more than {MAX_CALLS} calls")
        for i in range(1, times + 1):
            calls.append((step.tool, _fill(step.arguments, {**env, "i": i})))
    return calls


# --- edits ---------------------------------------------------------------------------------------------
class AddCompositeTool(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    op: Literal["add_composite_tool"] = "add_composite_tool"
    tool: CompositeTool


class RemoveCompositeTool(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    op: Literal["remove_composite_tool"] = "remove_composite_tool"
    name: str


def apply_composite_edit(data: dict[str, Any], edit: AddCompositeTool | RemoveCompositeTool,
                         env_tools: set[str] | None = None) -> dict[str, Any]:
    """A harness's JSON data with the edit applied (a new dict); EditError with the reason otherwise.

    Works on the data so it is independent of the `Harness` model: it needs the `composite_tools` list that
    `harness/program.py` adds, and refuses a harness without it.
    """
    if "composite_tools" not in data:
        raise EditError("this harness has no composite_tools (the harness schema in force does not support them)")
    tools = [dict(t) for t in data["composite_tools"]]
    names = [t["name"] for t in tools]
    if isinstance(edit, AddCompositeTool):
        if edit.tool.name in names:
            raise EditError(f"composite tool '{edit.tool.name}' exists; remove it first")
        if env_tools is not None and edit.tool.name in env_tools:
            raise EditError(f"'{edit.tool.name}' is an environment tool; give the composite tool another name")
        unknown = sorted({s.tool for s in edit.tool.steps} - env_tools) if env_tools is not None else []
        if unknown:
            raise EditError(f"composite tool '{edit.tool.name}' calls unknown tool(s) {unknown}")
        tools.append(edit.tool.model_dump(mode="json"))
    else:
        if edit.name not in names:
            raise EditError(f"no composite tool '{edit.name}' to remove")
        del tools[names.index(edit.name)]
    return {**data, "composite_tools": tools}
