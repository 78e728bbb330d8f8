"""code_refactor family: generator (package spec + request) and the oracle policy."""

from __future__ import annotations

import random
import shlex
from collections.abc import Sequence

from tasks.base import Environment, Family, instance_seed
from tasks.code_refactor.environment import CodeRefactorEnv
from tasks.code_refactor.package import KINDS, make_spec, render, request_text
from tasks.records import FinalAnswer, Step, TaskInstance, ToolCall
from tasks.tooling import ToolError

TEST_COMMAND = "python3 -m unittest discover -s tests -t ."
# the oracle drops unittest's elapsed time ("Ran 9 tests in 0.004s") so its own trajectories replay exactly
ORACLE_TEST_COMMAND = TEST_COMMAND + " 2>&1 | sed -E 's/ in [0-9.]+s$//'"


class CodeRefactor(Family):
    name = "code_refactor"
    description = "Apply a rename / add-parameter / extract-function / move-module refactoring across a package."
    difficulties = ("easy", "hard")

    def generate(self, index: int) -> TaskInstance:
        rng = random.Random(instance_seed(self.name, index))
        hard = index % 2 == 1
        kind = KINDS[(index // 2) % len(KINDS)]  # every split sees every kind at both levels
        spec = make_spec(rng, hard, kind)
        instruction = (
            f"The workspace holds the Python package `{spec.pkg}/` and its tests in `tests/`.\n"
            f"Refactoring request: {request_text(spec)}\n"
            f"Keep all behaviour otherwise unchanged; the tests must pass (`{TEST_COMMAND}`). "
            "When you are done, reply with a short summary of the change."
        )
        return self.new_instance(index, instruction=instruction, difficulty="hard" if hard else "easy",
                                 payload={"spec": spec.model_dump(mode="json")})

    def make_env(self, instance: TaskInstance) -> Environment:
        return CodeRefactorEnv(instance)

    def oracle_action(self, env: Environment, history: Sequence[Step]) -> ToolCall | FinalAnswer:
        """Look around once, then make the workspace equal the reference refactoring (rewrite files that
        differ, delete stray Python files), run the tests once, and finish."""
        assert isinstance(env, CodeRefactorEnv)
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
