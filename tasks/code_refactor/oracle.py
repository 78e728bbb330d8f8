"""code_refactor reference policy: look around once, then make the workspace equal the reference
refactoring (rewrite files that differ, delete stray Python files and anything in the way of a target),
run the tests once, and finish."""

from __future__ import annotations

import shlex
from collections.abc import Sequence

from tasks.code_refactor.data import TEST_COMMAND
from tasks.code_refactor.env import CodeRefactorEnv
from tasks.code_refactor.package import render
from tasks.records import FinalAnswer, Step, ToolCall
from tasks.tooling import ToolError

# the oracle drops unittest's elapsed time ("Ran 9 tests in 0.004s") so its own trajectories replay exactly
ORACLE_TEST_COMMAND = TEST_COMMAND + " 2>&1 | sed -E 's/ in [0-9.]+s$//'"


def next_action(env: CodeRefactorEnv, history: Sequence[Step]) -> ToolCall | FinalAnswer:
    call_id = f"oracle-{len(history)}"
    if not any(s.call.name == "list_files" for s in history):
        return ToolCall(id=call_id, name="list_files", arguments={"path": "."})
    target = render(env.spec, after=True)
    root = env.workspace
    in_the_way = sorted(p for p in target if (root / p).is_dir() or (root / p).is_symlink())
    stray = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.py")
                   if p.relative_to(root).as_posix() not in target)
    if in_the_way or stray:
        paths = " ".join(shlex.quote(p) for p in in_the_way + stray)
        return ToolCall(id=call_id, name="shell", arguments={"command": f"rm -rf -- {paths}"})
    for path, content in target.items():
        current = _read(env, path)
        if current == content:
            continue
        read = any(s.call.name == "read_file" and isinstance(s.call.arguments, dict)
                   and s.call.arguments.get("path") == path for s in history)
        if current is not None and not read:
            return ToolCall(id=call_id, name="read_file", arguments={"path": path})
        return ToolCall(id=call_id, name="write_file", arguments={"path": path, "content": content})
    last = history[-1].call if history else None
    if not (last and last.name == "shell" and isinstance(last.arguments, dict)
            and last.arguments.get("command") == ORACLE_TEST_COMMAND):
        return ToolCall(id=call_id, name="shell", arguments={"command": ORACLE_TEST_COMMAND})
    return FinalAnswer(text=f"Applied the requested {env.spec.kind.replace('_', ' ')} refactoring across "
                            f"{len(target)} files; the tests pass.")


def _read(env: CodeRefactorEnv, path: str) -> str | None:
    try:
        return env.read_text(path)
    except ToolError:
        return None
