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

This module holds the hook records and the decisions, as pure functions: `decide(hooks, event, state)` maps
an event (a model call about to happen, a tool call, a tool error, a finish attempt) and what the hooks may
read of the episode (`HookState`: firings so far, tools that ran without error) to a list of `Decision`s,
each naming the hook, its effect and the exact text the model (or the error field) gets. The runtime
(agents/rollout.py) only performs them, so every rule can be tested here without a model or environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

_ID = r"^[A-Za-z0-9_.\-]+$"

# What the model sees of the harness's own messages (the runtime writes these texts; readers match on them).
HOOK_PREFIX = "[harness] "
BLOCKED_PREFIX = "[harness] call blocked: "
NOT_RUN = "[harness] not executed: the episode stopped before this call ran."


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


# --- events, state, decisions ---------------------------------------------------------------------
class ModelCallEvent(_Frozen):
    """The model call of turn `turn` is about to happen; `context_chars` = `harness.context.content_chars`
    of the conversation. Checks `at_turn` and `context_size` hooks."""

    turn: int = Field(ge=0)
    context_chars: int = Field(ge=0)


class ToolCallEvent(_Frozen):
    """A tool call is about to run; `repeats` = how often this exact call (name + arguments) was made in the
    episode, this one included. Checks `before_tool_call` and `repeated_call` hooks."""

    turn: int = Field(ge=0)
    tool: str
    args_json: str
    repeats: int = Field(ge=1)


class ToolErrorEvent(_Frozen):
    """A tool call came back as an error (malformed calls included). Checks `after_tool_error` hooks."""

    turn: int = Field(ge=0)
    tool: str
    args_json: str


class FinishEvent(_Frozen):
    """The model answered without a tool call (a finish attempt). Checks `on_finish` hooks."""

    turn: int = Field(ge=0)


Event = ModelCallEvent | ToolCallEvent | ToolErrorEvent | FinishEvent


class HookState(_Frozen):
    """What hooks may read of the episode: firings so far per hook id, tools that ran without error."""

    fires: Mapping[str, int] = Field(default_factory=dict)
    succeeded: frozenset[str] = frozenset()


Effect = Literal["inject", "block", "refuse", "stop"]


class Decision(_Frozen):
    """One hook firing and what the runtime must do.

    - `inject`: add `message` as a user message (before a model call: at once; after a tool call: after the
      turn's tool messages, so the OpenAI order stays valid).
    - `block`: answer the tool call with `message` instead of running it.
    - `refuse`: refuse the finish; `message` is shown to the model as a user message and the episode goes on.
    - `stop`: end the episode (stop reason `harness_stop`) with `message` as the error text.
    `detail` is the firing's trigger-record detail ("<trigger>-><action>[: what]").
    """

    hook_id: str
    effect: Effect
    message: str
    detail: str


def decide(hooks: Sequence[Hook], event: Event, state: HookState) -> list[Decision]:
    """The hooks that fire on `event`, in harness order, with their effects. A hook at its `max_fires` is
    skipped; evaluation ends at the first `block` or `stop` (later hooks do not fire)."""
    out: list[Decision] = []
    for hook in hooks:
        if hook.max_fires is not None and state.fires.get(hook.id, 0) >= hook.max_fires:
            continue
        detail = _fires_on(hook, event, state)
        if detail is None:
            continue
        out.append(_decision(hook, event, detail))
        if out[-1].effect in ("block", "stop"):
            break
    return out


def _fires_on(hook: Hook, event: Event, state: HookState) -> str | None:
    """None if `hook` does not fire on `event`; else what the trigger record says about the firing."""
    w = hook.when
    if isinstance(event, ModelCallEvent):
        if isinstance(w, AtTurn) and w.turn == event.turn:
            return ""
        if isinstance(w, ContextSize) and event.context_chars > w.chars and state.fires.get(hook.id, 0) == 0:
            return f"{event.context_chars} chars"  # context_size fires once, on the first crossing
        return None
    if isinstance(event, ToolCallEvent):
        if not isinstance(w, BeforeToolCall | RepeatedCall) or not matches_call(w, event.tool, event.args_json):
            return None
        return None if isinstance(w, RepeatedCall) and event.repeats < w.n else event.tool
    if isinstance(event, ToolErrorEvent):
        return event.tool if isinstance(w, AfterToolError) and matches_call(w, event.tool, event.args_json) else None
    if not isinstance(w, OnFinish):
        return None
    a = hook.then
    if isinstance(a, Require):
        return None if any(tool_matches(a.tool, t) for t in state.succeeded) else f"missing {a.tool}"
    return ""


def _decision(hook: Hook, event: Event, detail: str) -> Decision:
    a = hook.then
    label = f"{hook.when.on}->{a.do}" + (f": {detail}" if detail else "")
    if isinstance(a, Stop):
        effect: Effect = "stop"
        message = f"stopped by hook '{hook.id}': {a.message}".rstrip(": ")
    elif isinstance(a, Block):
        effect, message = "block", BLOCKED_PREFIX + a.message
    elif isinstance(a, Require):
        effect = "refuse"
        message = HOOK_PREFIX + (a.message or f"Before finishing you must call the tool matching '{a.tool}' successfully.")
    else:  # inject; on a finish attempt it also refuses the finish
        effect = "refuse" if isinstance(event, FinishEvent) else "inject"
        message = HOOK_PREFIX + a.message
    return Decision(hook_id=hook.id, effect=effect, message=message, detail=label)


__all__ = [
    "BLOCKED_PREFIX", "HOOK_PREFIX", "NOT_RUN", "Action", "AfterToolError", "AtTurn", "BeforeToolCall", "Block",
    "ContextSize", "Decision", "Event", "FinishEvent", "Hook", "HookState", "Inject", "ModelCallEvent", "OnFinish",
    "RepeatedCall", "Require", "Stop", "ToolCallEvent", "ToolErrorEvent", "Trigger", "decide", "matches_call",
    "tool_matches",
]
