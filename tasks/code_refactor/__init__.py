"""code_refactor: apply a refactoring request consistently across a generated Python package."""

from __future__ import annotations

import random
from collections.abc import Sequence

from tasks.base import Draft, Environment, Family
from tasks.code_refactor import data, oracle, verify
from tasks.code_refactor.env import CodeRefactorEnv
from tasks.records import FinalAnswer, Step, ToolCall
from tasks.runtime.volatile import normalize_command_output


class CodeRefactor(Family):
    name = "code_refactor"
    description = "Apply a rename / add-parameter / extract-function / move-module refactoring across a package."
    difficulties = ("easy", "hard")
    check_names = verify.CHECK_NAMES
    env_class = CodeRefactorEnv

    def draft(self, index: int, rng: random.Random) -> Draft:
        return data.draft(index, rng)

    def oracle_action(self, env: Environment, history: Sequence[Step]) -> ToolCall | FinalAnswer:
        return oracle.next_action(self.own_env(env), history)

    def normalize_result(self, tool: str, content: str) -> str:
        return normalize_command_output(content)


__all__ = ["CodeRefactor", "CodeRefactorEnv"]
