"""code_refactor: apply a refactoring request consistently across a generated Python package."""

from tasks.code_refactor.family import CodeRefactor

__all__ = ["CodeRefactor"]
