"""code_refactor: apply a refactoring request consistently across a generated Python package."""

from __future__ import annotations

from tasks.base import Family
from tasks.code_refactor.env import CodeRefactorEnv


class CodeRefactor(Family):
    name = "code_refactor"
    description = "Apply a rename / add-parameter / extract-function / move-module refactoring across a package."
    env_class = CodeRefactorEnv


__all__ = ["CodeRefactor", "CodeRefactorEnv"]
