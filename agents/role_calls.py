"""Calls of the API roles that run no episode (the judge, the MLE-agent locator): each call's cost and outcome,
appended to `role_calls.jsonl` under the run so the run's budget counts them (`flows.round.budget.spent_usd`),
and added to the stage's spend cap as it happens.

    log = RoleCallLog(store.path("costs", "role_calls.jsonl"), cap=cap)
    judge = make_selector("judge:gemini/gemini-3-pro", role=models["judge"], calls=log)
    ...
    log.raise_if_failed("correction_data")   # a role that failed every call fails the stage, loudly

A call is `ok` when its reply could be used (parsed, or a tool call the agent could run); otherwise `reason`
says why (the model call failed, the reply was cut at max_tokens, it held no JSON, the JSON missed the schema).
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from agents.budget import SpendCap
from agents.records import ModelRole

if TYPE_CHECKING:
    from agents.client import ModelResponse

FILE_NAME = "role_calls.jsonl"


class RoleCall(BaseModel):
    """One model call of an API role."""

    model_config = ConfigDict(extra="forbid")

    role: str = Field(description="'judge', 'locator', ...")
    model: str = Field(description="The LiteLLM model string called.")
    ok: bool = Field(description="The reply could be used.")
    reason: str = Field(default="", description="Why not, when it could not.")
    cost_usd: float = Field(default=0.0, ge=0.0)
    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    finish_reason: str | None = Field(default=None, description="The provider's ('stop', 'length', 'tool_calls').")
    at: float = Field(default_factory=time.time, description="Unix time of the record.")


class RoleFailed(RuntimeError):
    """A role failed on every call it made in a stage: names the role, the model and the last reason."""


class RoleCallLog:
    """Where a stage's role calls go: a JSONL file (None: kept in memory only) and the run's spend cap."""

    def __init__(self, path: Path | None = None, cap: SpendCap | None = None) -> None:
        self.path, self.cap = path, cap
        self.calls: list[RoleCall] = []
        self._lock = threading.Lock()

    def check(self) -> None:
        """Before a call: raises agents.budget.BudgetSpent when the run's budget is spent."""
        if self.cap is not None:
            self.cap.check()

    def record(self, call: RoleCall) -> None:
        with self._lock:
            self.calls.append(call)
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                with open(self.path, "a") as f:  # one line per call: a crash loses at most the line in flight
                    f.write(call.model_dump_json() + "\n")
        if self.cap is not None:
            self.cap.add(call.cost_usd)

    def raise_if_failed(self, stage: str) -> None:
        """RoleFailed when some role made calls in this log and none of them was usable."""
        for role in dict.fromkeys(c.role for c in self.calls):
            mine = [c for c in self.calls if c.role == role]
            if not any(c.ok for c in mine):
                last = mine[-1]
                raise RoleFailed(f"{stage}: role '{role}' ({last.model}) failed on all {len(mine)} of its calls; "
                                 f"last reason: {last.reason}")


def read_role_calls(run_root: Path) -> list[RoleCall]:
    """Every role call recorded under a run (moved-aside `superseded` outputs excluded, as for trajectories)."""
    out = []
    for path in sorted(Path(run_root).rglob(FILE_NAME)):
        if "superseded" in path.parts:
            continue
        for line in path.read_text().splitlines():
            try:
                out.append(RoleCall.model_validate(json.loads(line)))
            except ValueError:  # a line cut by a crash
                continue
    return out


def role_calls_usd(run_root: Path) -> float:
    return sum(c.cost_usd for c in read_role_calls(run_root))


def role_for(model: str, role: ModelRole | None, *, api_base: str | None = None, max_tokens: int | None = None) \
        -> ModelRole:
    """How to call `model` for a role: the role record's options (api_base, api_key_env, max_tokens, timeout_s,
    retries, prices) with `model` as its model string; without a role record, the defaults (and `api_base`)."""
    if role is not None:
        return role.model_copy(update={"model": model, "return_token_ids": False})
    extra: dict[str, Any] = {"api_base": api_base} if api_base else {}
    if max_tokens is not None:
        extra["max_tokens"] = max_tokens
    return ModelRole(model=model, temperature=0.0, return_token_ids=False, **extra)


_THINK = re.compile(r"<think>.*?</think>|<\|channel>.*?<channel\|>", re.S)


def strip_think(text: str) -> str:
    """A reply without its think blocks (`<think>...</think>`, Gemma's thought channel); an unclosed `<think>`
    keeps nothing after it (the answer never came), a lone `</think>` keeps what follows it."""
    text = _THINK.sub("", text)
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        text = text.split("<think>", 1)[0]
    return text.strip()


def reply_text(resp: ModelResponse) -> str:
    """What a text-answer role replied: the content without think blocks; when the content is empty and the
    model made a tool call instead, that call's arguments (a model that answers through a function)."""
    text = strip_think(resp.content)
    if not text and resp.tool_calls:
        args = resp.tool_calls[0].arguments
        text = args if isinstance(args, str) else json.dumps(args)
    return text


def cut_note(resp: ModelResponse, role: ModelRole, role_name: str) -> str:
    """A reason suffix when the reply was cut by the token limit."""
    if resp.finish_reason != "length":
        return ""
    return (f" (the reply was cut at max_tokens={role.max_tokens}: raise models.{role_name}.max_tokens, a thinking "
            "model needs room for its thoughts)")


def call_record(role_name: str, role: ModelRole, resp: ModelResponse | None, ok: bool, reason: str = "") -> RoleCall:
    if resp is None:
        return RoleCall(role=role_name, model=role.model, ok=ok, reason=reason)
    return RoleCall(role=role_name, model=role.model, ok=ok, reason=reason, cost_usd=resp.cost_usd,
                    prompt_tokens=resp.prompt_tokens, completion_tokens=resp.completion_tokens,
                    finish_reason=resp.finish_reason)
