"""Tool-call arguments as a model sends them: untrusted JSON text, parsed without letting it crash the runtime.

`json.loads` recurses once per nesting level, so `[[[...]]]` 10,000 levels deep raises `RecursionError`
(not a decode error), and a deep object that does parse breaks every later `json.dumps` of the call. The
nesting is measured first by a flat scan (no recursion, bounded by the text length); arguments nested deeper
than `MAX_ARGS_DEPTH` stay the raw string, which the runtime answers as a malformed call (`problem` says why).
Tools cap nesting lower per argument (`tasks.tooling.MAX_ARGUMENT_DEPTH`); this is the parse guard.
"""

from __future__ import annotations

import json
from typing import Any

OVER_CAP_PREFIX = "[harness] not executed: too many tool calls in one turn"  # replay skips these calls
MAX_ARGS_DEPTH = 64  # lists and objects nested in one call's arguments, the arguments object included
_OPEN, _CLOSE = frozenset("[{"), frozenset("]}")


def json_depth(text: str, stop_at: int = MAX_ARGS_DEPTH + 1) -> int:
    """The deepest bracket nesting of JSON text (brackets inside strings not counted); stops at `stop_at`."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in _OPEN:
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest >= stop_at:
                    return deepest
        elif ch in _CLOSE:
            depth -= 1
    return deepest


def value_depth(value: Any, stop_at: int = MAX_ARGS_DEPTH + 1) -> int:
    """The nesting depth of an already-parsed value (iterative; stops at `stop_at`)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list, tuple)):
            deepest = max(deepest, d)
            if deepest >= stop_at:
                return deepest
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def parse_arguments(raw: Any) -> dict[str, Any] | str:
    """The call's arguments as a dict, or the raw text when they are not a JSON object (malformed)."""
    if isinstance(raw, dict):
        if value_depth(raw) > MAX_ARGS_DEPTH:
            return f"<arguments nested more than {MAX_ARGS_DEPTH} levels deep>"
        return raw
    if not raw:
        return {}
    text = str(raw)
    if json_depth(text) > MAX_ARGS_DEPTH:
        return text
    try:
        parsed = json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError, TypeError):
        return text
    return parsed if isinstance(parsed, dict) else text


def problem(raw: str) -> str:
    """Why raw arguments (kept as text) are not a call's arguments, for the error message to the model."""
    depth = json_depth(raw)
    if depth > MAX_ARGS_DEPTH:
        return f"arguments are nested more than {MAX_ARGS_DEPTH} levels deep; send a flat JSON object"
    return f"arguments must be a JSON object, got {raw[:200]!r}"


def over_cap_message(n_calls: int, cap: int) -> str:
    """What each call past `Limits.max_tool_calls_per_turn` is answered with (the same text for all of them)."""
    return (f"{OVER_CAP_PREFIX} ({n_calls} calls; the limit is {cap} per turn). Calls {cap + 1}-{n_calls} were "
            f"not run; send at most {cap} calls per turn.")
