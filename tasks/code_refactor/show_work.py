"""code_refactor, a show-your-work demonstration policy for RENAME requests (for training the micro student; the
pure oracle in oracle.py is unchanged and stays the reference).

The whole refactoring is one shell program, the same text for every rename instance except the two names it
copies from the instruction: find the old name (word-bounded) in the workspace's Python files, rewrite it
with sed, then run the tests. Other refactoring kinds have no show-your-work policy here (`applies` is
False): their demonstrations come from the `flawed/code_refactor@native` policy.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tasks.code_refactor.data import TEST_COMMAND
from tasks.code_refactor.env import CodeRefactorEnv
from tasks.records import FinalAnswer, Step, ToolCall, TaskInstance

_RENAME = re.compile(r"Rename the function `(\w+)` \(defined in `[\w/]+\.py`\) to `(\w+)`")


def applies(instance: TaskInstance) -> bool:
    return _RENAME.search(instance.instruction) is not None


def _commands(old: str, new: str) -> list[str]:
    return [f"grep -rnw --include='*.py' '{old}' .",
            f"grep -rlw --include='*.py' '{old}' . | xargs sed -i 's/\\b{old}\\b/{new}/g' && "
            f"grep -rnw --include='*.py' '{new}' .",
            TEST_COMMAND + " 2>&1 | tail -n 3"]


def next_action(env: CodeRefactorEnv, history: Sequence[Step]) -> ToolCall | FinalAnswer:
    m = _RENAME.search(env.instance.instruction)
    if m is None:
        return FinalAnswer(text="This request is not a rename; no change made.")
    done = [s.call.arguments.get("command") for s in history if s.call.name == "shell" and isinstance(s.call.arguments, dict)]
    for command in _commands(m.group(1), m.group(2)):
        if command not in done:
            return ToolCall(name="shell", arguments={"command": command})
    return FinalAnswer(text=f"Renamed `{m.group(1)}` to `{m.group(2)}` in every file; the tests pass.")
