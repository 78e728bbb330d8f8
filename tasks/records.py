"""Records the task suite owns: instances, tool schemas, tool calls and results, verdicts.

Every other package reads these; none of them knows about models or harnesses.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

Split = Literal["train", "val", "test", "pretrain"]
SPLITS: tuple[Split, ...] = ("train", "val", "test")  # the evaluation splits (indices 0-99)
PRETRAIN_START = 1000  # indices >= this form the `pretrain` split: demonstrations for students, never evaluated


class TaskInstance(BaseModel):
    """One seeded task: what the user asks plus the private payload the environment is built from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(description="Stable id, '<family>/<index>'.")
    family: str
    index: int = Field(ge=0, description="0-99: train/val/test; >= 1000: pretrain. Fixes the split.")
    split: Split
    instruction: str = Field(description="The task prompt the user message carries.")
    difficulty: str = Field(description="e.g. 'easy' | 'hard'; at least two levels per family.")
    seed: int
    payload: dict[str, Any] = Field(default_factory=dict, description="Generator output; JSON-serialisable.")


class ToolSpec(BaseModel):
    """An OpenAI function schema: what the model sees of a tool."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    description: str
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})

    def openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


class ToolCall(BaseModel):
    """A tool call as the model produced it. `arguments` stays a raw string when it was not valid JSON."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = ""
    name: str
    arguments: dict[str, Any] | str = Field(default_factory=dict)

    def arguments_json(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments, sort_keys=True)


class ToolResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    content: str
    is_error: bool = False


class FinalAnswer(BaseModel):
    """The end of an episode: the agent's final message (an answer for question tasks, else a summary)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str = ""


class Verdict(BaseModel):
    """The verifier's judgement. `score` is in [0, 1]; `feedback` is written for a reflection model."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    score: float = Field(ge=0.0, le=1.0)
    passed_checks: list[str] = Field(default_factory=list)
    failed_checks: list[str] = Field(default_factory=list)
    feedback: str = ""

    @field_validator("score")
    @classmethod
    def _finite(cls, v: float) -> float:
        if v != v:  # NaN
            raise ValueError("score is NaN")
        return v

    @property
    def passed(self) -> bool:
        return self.score >= 1.0

    @classmethod
    def from_checks(cls, checks: dict[str, bool], details: dict[str, str] | None = None) -> "Verdict":
        """Score = fraction of named checks passed; feedback names each failed check and why."""
        details = details or {}
        passed = [k for k, ok in checks.items() if ok]
        failed = [k for k, ok in checks.items() if not ok]
        score = len(passed) / len(checks) if checks else 0.0
        lines = [f"FAILED {k}: {details.get(k, '')}".rstrip(": ") for k in failed]
        return cls(
            score=score,
            passed_checks=passed,
            failed_checks=failed,
            feedback="\n".join(lines) if lines else "all checks passed",
        )

    @classmethod
    def from_items(cls, checks: dict[str, list[tuple[bool, str]]]) -> "Verdict":
        """For checks made of several items (one per requested change, one per expected name): score =
        fraction of all items passed; a check passes when all its items do; feedback names each failed
        item's reason. Check names stay the family's fixed names whatever the instance asks for."""
        items = [ok for group in checks.values() for ok, _ in group]
        passed = [k for k, group in checks.items() if all(ok for ok, _ in group)]
        failed = [k for k in checks if k not in passed]
        lines = [f"FAILED {k}: " + "; ".join(why for ok, why in checks[k] if not ok) for k in failed]
        return cls(
            score=sum(items) / len(items) if items else 0.0,
            passed_checks=passed,
            failed_checks=failed,
            feedback="\n".join(lines) if lines else "all checks passed",
        )


class Step(BaseModel):
    """One executed tool call and what the environment answered: the unit of history and of replay."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    call: ToolCall
    result: ToolResult
