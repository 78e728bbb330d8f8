"""code_refactor, a show-your-work demonstration policy for RENAME requests (for training the micro student; the
pure oracle in oracle.py is unchanged and stays the reference).

The whole refactoring is one shell program, the same text for every rename instance except the two names it
copies from the instruction: find the old name (word-bounded) in the workspace's Python files, rewrite it
with sed, then run the tests (`program="flag"`, M1: each search opens with `tests=1; ` or `tests=0; `, the
decision, and leaves tests/ out under 0). `program="kinds"` is "flag" for renames and covers the other three
refactoring kinds with the programs of show_work_kinds.py (same flag, same recovery); under "grep" and "flag" the
other kinds have no show-your-work policy (`applies` is False): their demonstrations come from the
`flawed/code_refactor@native` policy.

`knows` names the knowledge items (harness/evolution/cards/code_refactor.yaml) the policy applies; the caller
decides it (training/micro/policies.py: an item the harness states is always applied, others only sometimes):
- without `update_every_reference` the rename searches only the package directory, so the tests that still
  use the old name fail;
- with `run_tests_before_finishing`, a failing test run is followed by the whole-repository rename and a
  second test run (the recovery); without it the policy finishes after the failing run.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tasks.code_refactor.env import CodeRefactorEnv
from tasks.code_refactor.show_work_kinds import KINDS as _KINDS
from tasks.code_refactor.show_work_kinds import TESTS as _TESTS
from tasks.code_refactor.show_work_kinds import commands as kind_commands
from tasks.code_refactor.show_work_kinds import kind_of, recovery
from tasks.records import FinalAnswer, Step, ToolCall, TaskInstance

_RENAME = re.compile(r"Rename the function `(?P<old>\w+)` \(defined in `(?P<path>[\w/]+\.py)`\) to `(?P<new>\w+)`")


def applies(instance: TaskInstance, program: str = "grep") -> bool:
    """Renames under every program; under "kinds" every refactoring kind the generator draws."""
    if program == "kinds":
        return any(p.search(instance.instruction) for p in (_RENAME, *_KINDS.values()))
    return _RENAME.search(instance.instruction) is not None


def rename_request(instance: TaskInstance) -> tuple[str, str] | None:
    """(old, new) of a rename request, else None."""
    m = _RENAME.search(instance.instruction)
    return (m["old"], m["new"]) if m else None


ALL_KNOWN = frozenset({"update_every_reference", "run_tests_before_finishing"})


PROGRAMS = ("grep", "flag", "kinds")  # "grep": the program every committed M0 was trained on; "kinds": "flag" for
# renames and the programs of tasks/code_refactor/show_work_kinds.py for the other three refactoring kinds
# The "flag" program (M1, 2026-12-06): every search-and-rename command opens with the decision, a flag named for
# what the item is about (`tests=1` searches the tests too, `tests=0` leaves tests/ out), as payroll_audit's
# `deduct_break = True` does; the rest of the command is the same text either way, so the choice is one token
# near the turn's start and never a package name to copy.
_FLAGGED = "tests={flag}; grep -r{opts} $([ $tests = 1 ] || echo --exclude-dir=tests) --include='*.py' '{name}' ."


def _commands(old: str, new: str, scope: str = ".", program: str = "grep") -> list[str]:
    """The rename's commands: search, rename (and list), test. "grep" searches `scope`; "flag" searches the whole
    repository, leaving tests/ out unless the flag says tests (any scope but "." leaves them out)."""
    if program not in PROGRAMS:
        raise ValueError(f"unknown code_refactor program {program!r} ({', '.join(PROGRAMS)})")
    if program in ("flag", "kinds"):
        flag = int(scope == ".")
        return [_FLAGGED.format(flag=flag, opts="nw", name=old),
                _FLAGGED.format(flag=flag, opts="lw", name=old) + f" | xargs sed -i 's/\\b{old}\\b/{new}/g' && "
                f"grep -rnw --include='*.py' '{new}' .",
                _TESTS]
    return [f"grep -rnw --include='*.py' '{old}' {scope}",
            f"grep -rlw --include='*.py' '{old}' {scope} | xargs sed -i 's/\\b{old}\\b/{new}/g' && "
            f"grep -rnw --include='*.py' '{new}' {scope}",
            _TESTS]


def _plan(m: re.Match[str], knows: frozenset[str], program: str) -> list[str]:
    old, new, path = m["old"], m["new"], m["path"]
    if "update_every_reference" in knows:
        return _commands(old, new, program=program)
    return _commands(old, new, path.split("/")[0] + "/", program)


def next_action(env: CodeRefactorEnv, history: Sequence[Step],
                knows: frozenset[str] = ALL_KNOWN, program: str = "grep") -> ToolCall | FinalAnswer:
    m = _RENAME.search(env.instance.instruction)
    if m is not None:
        plan, fix = _plan(m, knows, program), _commands(m["old"], m["new"], program=program)[1:]
        done_text = f"Renamed `{m['old']}` to `{m['new']}` in every file; the tests pass."
    elif program == "kinds" and (found := kind_of(env.instance.instruction)) is not None:
        kind, km = found
        plan, fix = kind_commands(kind, km, int("update_every_reference" in knows)), recovery(kind, km)
        done_text = f"Applied the {kind.replace('_', ' ')} refactoring across the repository; the tests pass."
    else:
        return FinalAnswer(text="This request is not a rename; no change made.")
    shell = [s for s in history if s.call.name == "shell" and isinstance(s.call.arguments, dict)]
    done = [s.call.arguments.get("command") for s in shell]
    for command in plan:
        if command not in done:
            return ToolCall(name="shell", arguments={"command": command})
    failed = "OK" not in shell[-1].result.content.split()
    if failed and "run_tests_before_finishing" in knows and done.count(_TESTS) < 2:
        for command in fix:  # the whole-repository change, then the tests again
            if done.count(command) < (2 if command == _TESTS else 1):
                return ToolCall(name="shell", arguments={"command": command})
    return FinalAnswer(text=done_text)
