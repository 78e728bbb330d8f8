"""The tool calls of a trajectory, flattened in order, each with what became of it.

A call is `ok` (ran, no error), an `error` (the tool or the environment refused it), `blocked` (a harness hook
answered it instead of the environment), `not_run` (the episode stopped first) or `malformed` (a tool name
the model was not shown, or arguments that are not a JSON object). `schema_problem` compares the arguments
with the JSON schema the model saw (`Trajectory.tools`): a missing required argument, an unknown argument or
a value of the wrong JSON type, even when the environment accepted the call.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from agents.records import Trajectory
from agents.rollout import BLOCKED_PREFIX, NOT_RUN
from analysis.actions import Action, action_of

PATH_KEYS = ("path", "key", "title", "file", "filename", "name")  # arguments that name an output
_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,), "integer": (int,), "number": (int, float), "boolean": (bool,), "array": (list,),
    "object": (dict,), "null": (type(None),),
}


class Call(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    turn: int
    name: str
    args_json: str
    action: Action
    ok: bool
    error: bool
    blocked: bool
    not_run: bool
    malformed: bool
    schema_problem: str
    result: str
    named_paths: tuple[str, ...]

    @property
    def key(self) -> tuple[str, str]:
        return self.name, self.args_json


def _type_ok(value: Any, schema: dict[str, Any]) -> bool:
    if "anyOf" in schema:
        return any(_type_ok(value, s) for s in schema["anyOf"])
    kind = schema.get("type")
    if kind is None:
        return True
    kinds = kind if isinstance(kind, list) else [kind]
    if isinstance(value, bool) and "boolean" not in kinds:
        return False  # JSON true is not a number
    if not any(isinstance(value, _JSON_TYPES.get(k, (object,))) for k in kinds):
        return False
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return all(_type_ok(v, schema["items"]) for v in value)
    return True


def schema_problem(arguments: dict[str, Any], schema: dict[str, Any] | None) -> str:
    """'' when `arguments` fit the tool's JSON schema, else what does not fit (first problem only)."""
    if not schema:
        return ""
    props: dict[str, Any] = schema.get("properties") or {}
    missing = [k for k in schema.get("required") or [] if k not in arguments]
    if missing:
        return f"missing required argument '{missing[0]}'"
    if props:
        unknown = [k for k in arguments if k not in props]
        if unknown:
            return f"unknown argument '{unknown[0]}'"
    for k, v in arguments.items():
        if k in props and not _type_ok(v, props[k]):
            return f"argument '{k}' has the wrong type ({type(v).__name__})"
    return ""


def tool_schemas(trajectory: Trajectory) -> dict[str, dict[str, Any]]:
    """Tool name -> parameters schema, as the model saw them."""
    out: dict[str, dict[str, Any]] = {}
    for t in trajectory.tools:
        fn = t.get("function") or {}
        if fn.get("name"):
            out[str(fn["name"])] = fn.get("parameters") or {}
    return out


def _named_paths(arguments: dict[str, Any] | str) -> tuple[str, ...]:
    if not isinstance(arguments, dict):
        return ()
    return tuple(str(arguments[k]) for k in PATH_KEYS if isinstance(arguments.get(k), str) and arguments[k])


def calls_of(trajectory: Trajectory) -> list[Call]:
    """Every tool call of the trajectory, in order (see the module docstring)."""
    schemas = tool_schemas(trajectory)
    out: list[Call] = []
    for turn in trajectory.turns:
        for i, call in enumerate(turn.tool_calls):
            res = turn.tool_results[i] if i < len(turn.tool_results) else None
            content = res.content if res is not None else NOT_RUN
            blocked = content.startswith(BLOCKED_PREFIX)
            not_run = content.startswith(NOT_RUN)
            unknown = bool(schemas) and call.name not in schemas
            malformed = unknown or isinstance(call.arguments, str)
            problem = "" if malformed or not isinstance(call.arguments, dict) else \
                schema_problem(call.arguments, schemas.get(call.name))
            is_error = bool(res is not None and res.is_error)
            out.append(Call(
                turn=turn.index, name=call.name, args_json=call.arguments_json(), action=action_of(call.name),
                ok=res is not None and not is_error, error=is_error and not (blocked or not_run), blocked=blocked,
                not_run=not_run, malformed=malformed, schema_problem=problem, result=content,
                named_paths=_named_paths(call.arguments)))
    return out


def arguments_of(call: Call) -> dict[str, Any] | None:
    try:
        value = json.loads(call.args_json)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
