"""Hooks: declarative rules the rollout runtime applies between model and environment.

A hook is a trigger (when) plus an action (what). Triggers and the moment the runtime checks them:

| trigger            | checked                                   | allowed actions              |
|--------------------|-------------------------------------------|------------------------------|
| `before_tool_call` | before each tool call runs                | inject, block, stop          |
| `repeated_call`    | before a call identical (name + arguments)| inject, block, stop          |
|                    | to earlier ones; fires on the n-th and on |                              |
|                    | every later identical call                |                              |
| `after_tool_error` | after a call returned an error            | inject, stop                 |
| `at_turn`          | before the model call of turn k (0-based) | inject, stop                 |
| `on_finish`        | when the model answers with no tool call  | inject, require, stop        |
| `context_size`     | before a model call, the first time the   | inject, stop                 |
|                    | conversation passes `chars` characters    |                              |

Actions: `inject` adds a user message (after the turn's tool messages, so the OpenAI message order stays
valid); `block` answers the call with an error message instead of running it (the environment never sees
it); `require` refuses a finish until a tool whose name matches `tool` has run successfully (the message
tells the model what is missing); `stop` ends the episode. On `on_finish`, `inject` also refuses the finish
once per firing (the model sees the message and goes on). `max_fires` bounds how often one hook fires in
an episode (None = no bound); a refused finish can therefore not loop forever when it is set.

This module holds only data and pure matching; the runtime (agents/rollout.py) performs the actions.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

_ID = r"^[A-Za-z0-9_.\-]+$"


def _check_regex(v: str) -> str:
    try:
        re.compile(v)
    except re.error as e:
        raise ValueError(f"invalid regular expression {v!r}: {e}") from None
    return v


Regex = Annotated[str, AfterValidator(_check_regex)]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# --- triggers -------------------------------------------------------------------------------------
class BeforeToolCall(_Frozen):
    on: Literal["before_tool_call"] = "before_tool_call"
    tool: Regex = Field(default=".*", description="Regex, full match on the tool name.")
    args: Regex | None = Field(default=None, description="Regex, searched in the call's arguments as JSON text.")


class RepeatedCall(_Frozen):
    on: Literal["repeated_call"] = "repeated_call"
    n: int = Field(default=3, ge=2, description="Fires on the n-th identical call (same name and arguments).")
    tool: Regex = Field(default=".*", description="Regex, full match on the tool name.")


class AfterToolError(_Frozen):
    on: Literal["after_tool_error"] = "after_tool_error"
    tool: Regex = Field(default=".*", description="Regex, full match on the tool name.")


class AtTurn(_Frozen):
    on: Literal["at_turn"] = "at_turn"
    turn: int = Field(ge=0, description="0-based assistant turn index.")


class OnFinish(_Frozen):
    on: Literal["on_finish"] = "on_finish"


class ContextSize(_Frozen):
    on: Literal["context_size"] = "context_size"
    chars: int = Field(gt=0, description="Total characters of message contents the model would see.")


Trigger = Annotated[
    BeforeToolCall | RepeatedCall | AfterToolError | AtTurn | OnFinish | ContextSize, Field(discriminator="on")
]


# --- actions --------------------------------------------------------------------------------------
class Inject(_Frozen):
    do: Literal["inject"] = "inject"
    message: str = Field(min_length=1)


class Block(_Frozen):
    do: Literal["block"] = "block"
    message: str = Field(min_length=1, description="What the model gets back instead of the tool's answer.")


class Require(_Frozen):
    do: Literal["require"] = "require"
    tool: Regex = Field(description="Regex, full match: a tool that must have run without error before finishing.")
    message: str = Field(default="", description="Shown when the requirement is not met (a default names the tool).")


class Stop(_Frozen):
    do: Literal["stop"] = "stop"
    message: str = ""


Action = Annotated[Inject | Block | Require | Stop, Field(discriminator="do")]

_ALLOWED: dict[str, set[str]] = {
    "before_tool_call": {"inject", "block", "stop"},
    "repeated_call": {"inject", "block", "stop"},
    "after_tool_error": {"inject", "stop"},
    "at_turn": {"inject", "stop"},
    "on_finish": {"inject", "require", "stop"},
    "context_size": {"inject", "stop"},
}


class Hook(_Frozen):
    """One rule; `id` is its stable component id (`hook:<id>` in `Harness.components()`)."""

    id: str = Field(pattern=_ID)
    when: Trigger
    then: Action
    max_fires: int | None = Field(default=None, ge=1, description="At most this many firings per episode.")
    note: str = Field(default="", description="Why the hook exists (for readers and reflection models).")

    @model_validator(mode="after")
    def _action_fits_trigger(self) -> "Hook":
        allowed = _ALLOWED[self.when.on]
        if self.then.do not in allowed:
            raise ValueError(
                f"hook '{self.id}': action '{self.then.do}' cannot follow trigger '{self.when.on}' "
                f"(allowed: {', '.join(sorted(allowed))})"
            )
        return self


# --- pure matching --------------------------------------------------------------------------------
def matches_call(trigger: BeforeToolCall | RepeatedCall | AfterToolError, name: str, args_json: str) -> bool:
    if not re.fullmatch(trigger.tool, name):
        return False
    if isinstance(trigger, BeforeToolCall) and trigger.args is not None:
        return re.search(trigger.args, args_json) is not None
    return True


def tool_matches(pattern: str, name: str) -> bool:
    return re.fullmatch(pattern, name) is not None


__all__ = [
    "Action", "AfterToolError", "AtTurn", "BeforeToolCall", "Block", "ContextSize", "Hook", "Inject",
    "OnFinish", "RepeatedCall", "Require", "Stop", "Trigger", "matches_call", "tool_matches",
]
