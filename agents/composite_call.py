"""Running a composite tool call (harness/composite.py) for the rollout runtime and for prefix replay.

One call of a composite tool expands into environment calls (`expand_call`); the runtime runs all of them in
order, like the calls of one reply (a failing step does not stop the later ones, so replaying the expansion
rebuilds the same state), and `joined` folds their results into the one tool message the model sees:
`[k/n] tool {arguments}` then the result, per call. The joined result is an error when any step failed. A
call that does not expand (bad arguments, too many calls) is an error message written for the model and runs
nothing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from harness.composite import CompositeError, CompositeTool, expand
from tasks.base import Environment
from tasks.records import ToolCall, ToolResult


def expand_call(tool: CompositeTool, call: ToolCall) -> list[ToolCall] | ToolResult:
    """The environment calls `call` stands for (ids `<call id>.<k>`), or the error result when it does not expand."""
    if isinstance(call.arguments, str):
        return ToolResult(content=f"Error: {tool.name}: arguments must be a JSON object", is_error=True)
    try:
        steps = expand(tool, call.arguments)
    except CompositeError as e:
        return ToolResult(content=f"Error: {e}", is_error=True)
    return [ToolCall(id=f"{call.id}.{k}", name=name, arguments=args) for k, (name, args) in enumerate(steps, 1)]


def joined(steps: Sequence[tuple[ToolCall, ToolResult]]) -> ToolResult:
    """One tool message for the results of a composite call's environment calls."""
    n = len(steps)
    if n == 0:
        return ToolResult(content="(the composite tool made no calls)")
    parts = [f"[{k}/{n}] {c.name} {json.dumps(c.arguments, sort_keys=True)}\n{r.content}"
             for k, (c, r) in enumerate(steps, 1)]
    failed = [k for k, (_, r) in enumerate(steps, 1) if r.is_error]
    if failed:
        parts.append(f"({len(failed)} of {n} calls failed: {', '.join(map(str, failed))})")
    return ToolResult(content="\n\n".join(parts), is_error=bool(failed))


async def call_composite(env: Environment, tool: CompositeTool, call: ToolCall) -> tuple[ToolResult, set[str]]:
    """Run one composite call on `env`: the joined result and the environment tools that succeeded."""
    calls = expand_call(tool, call)
    if isinstance(calls, ToolResult):
        return calls, set()
    steps = [(c, await env.call(c.name, c.arguments)) for c in calls]
    return joined(steps), {c.name for c, r in steps if not r.is_error}
