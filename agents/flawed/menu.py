"""What a family's fault menu is made of: beliefs (wrong ideas the oracle then acts on) and slips (a wrong call
made while the student believes it made the right one).

Two mechanisms, because the oracle is a state-based policy that repairs whatever the state shows is wrong:

- A `Belief` changes what the oracle READS: the student's policy is the oracle evaluated on a view of the
  environment (a shallow copy with a changed payload or flag: a product that is not low, a page already
  read, the superseded prices). It acts consistently on the wrong idea from then on (rows, emails and the
  finish all agree), and never repairs it, because in its view nothing is wrong.
- A `Slip` changes what the student WRITES once: the emitted call differs from the oracle's intended call,
  and the student's own copy of the environment (its belief) executes the intended call. It then acts from
  what it believes it did, so the real state keeps the slip.

Both are kept until feedback reaches the student (policy.py): a `[harness]` message that contains one of the
fault's `cues` is followed with the profile's `recovery.hook` probability; an unexpected tool error makes it
re-sync its belief with reality with `recovery.tool_error`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tasks.records import FinalAnswer, Step, ToolCall

Action = ToolCall | FinalAnswer


class NotApplicable(Exception):
    """This fault cannot be made from this action or state (a slip's transform finds nothing to change)."""


@dataclass(frozen=True)
class Belief:
    """A wrong belief about one unit (a page, a thread, a rule). `apply(view, unit)` changes a shallow copy of
    the environment that the oracle then reads; `units(env)` lists the candidates (empty: not applicable).

    Its opportunity is the first turn where holding it changes the oracle's action (the decision point);
    drawn there once (see policy.py). `long_context` beliefs (a forgotten retrieved item) are candidates only
    while the conversation is longer than the profile's `long_context_chars`, and only for units `retrieved`
    says were read."""

    kind: str
    category: str
    units: Callable[[Any], Sequence[str]]
    apply: Callable[[Any, str], None]
    detail: str  # '{unit}' is filled in
    key: str | None = None
    cues: tuple[str, ...] = ()
    retrieved: Callable[[Any, Sequence[Step], str], bool] | None = None

    @property
    def long_context(self) -> bool:
        return self.category == "long_context"


@dataclass(frozen=True)
class Slip:
    """A wrong version of one intended action. `transform(env, action)` returns what the student emits
    instead, or raises NotApplicable. Drawn once per episode, at the first turn whose intended action it
    transforms (family slips); generic tool_use slips are drawn every turn (generic.py)."""

    kind: str
    category: str
    transform: Callable[[Any, Action], Action]
    detail: str
    key: str | None = None
    cues: tuple[str, ...] = ()


@dataclass(frozen=True)
class FamilyMenu:
    """One family's faults. Generic faults (tool_use variants, finish_early, loop, skip_write, requery) come
    from generic.py and use `adjacent`, `read_tools` and `write_tools`; `not_applicable` says, per category,
    which instances cannot get a family-specific fault of it and why (docs/flawed.md lists them)."""

    family: str
    beliefs: tuple[Belief, ...] = ()
    slips: tuple[Slip, ...] = ()
    adjacent: dict[str, Callable[[ToolCall], ToolCall]] = field(default_factory=dict)
    read_tools: frozenset[str] = frozenset()
    write_tools: frozenset[str] = frozenset()
    not_applicable: dict[str, str] = field(default_factory=dict)

    def kinds(self) -> set[str]:
        return {b.kind for b in self.beliefs} | {s.kind for s in self.slips}


def same_action(a: Action, b: Action) -> bool:
    if isinstance(a, FinalAnswer) or isinstance(b, FinalAnswer):
        return isinstance(a, FinalAnswer) and isinstance(b, FinalAnswer) and a.text == b.text
    return a.name == b.name and a.arguments_json() == b.arguments_json()


def call_of(action: Action, name: str) -> ToolCall:
    """`action` if it is a dict-argument call of `name`, else NotApplicable."""
    if isinstance(action, ToolCall) and action.name == name and isinstance(action.arguments, dict):
        return action
    raise NotApplicable(f"not a {name} call")


def with_args(call: ToolCall, **changes: Any) -> ToolCall:
    assert isinstance(call.arguments, dict)
    return call.model_copy(update={"arguments": {**call.arguments, **changes}})


def read_before(history: Sequence[Step], name: str, pred: Callable[[dict[str, Any]], bool] = lambda a: True) -> bool:
    """Whether `history` holds an error-free call of `name` whose arguments satisfy `pred`."""
    return any(s.call.name == name and not s.result.is_error and isinstance(s.call.arguments, dict)
               and pred(s.call.arguments) for s in history)


__all__ = ["Action", "Belief", "FamilyMenu", "NotApplicable", "Slip", "call_of", "read_before",
           "same_action", "with_args"]
