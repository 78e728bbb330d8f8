"""Context policy: what of the conversation the model sees on each call.

Three knobs, all optional (the baseline uses none):
- `max_tool_result_chars`: a tool result longer than this keeps its head and tail and says how much was cut
  in the middle (the ends of listings and logs usually carry the most information).
- `keep_last_turns`: only the last k assistant turns (each with its tool answers and injected messages) are
  sent; everything before the first assistant turn (system prompt, task) is always kept. Older turns are
  replaced by one note, or by a summary when `summarize_with` names a model role.
- `summarize_with`: the role that writes that summary: "self" (the episode's own model) or a name the
  caller resolves (agents/rollout.py takes a mapping of roles). The summary is written by the runtime; this
  module only decides what to cut and builds the messages, so `harness/` never calls a model itself.

The full, untrimmed conversation is what a trajectory stores; these views are per call. The window is a
`ContextCut` (which messages were replaced by which note): the runtime records it per turn, so the exact
view of any turn is `apply_cut(trajectory.messages[:n], cut)` (`Trajectory.model_messages(turn)`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

SUMMARY_PREFIX = "[harness] Summary of earlier turns:"
OMITTED_PREFIX = "[harness]"


class ContextPolicy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_tool_result_chars: int | None = Field(default=None, ge=200, description="Head+tail truncation size.")
    head_fraction: float = Field(default=0.5, gt=0.0, lt=1.0, description="Share of the kept characters taken from the head.")
    keep_last_turns: int | None = Field(default=None, ge=1, description="Assistant turns sent in full.")
    summarize_with: str | None = Field(default=None, description="'self' or a model role name; needs keep_last_turns.")

    @model_validator(mode="after")
    def _summary_needs_window(self) -> "ContextPolicy":
        if self.summarize_with is not None and self.keep_last_turns is None:
            raise ValueError("summarize_with needs keep_last_turns (what would be summarized otherwise?)")
        return self


def truncate(text: str, max_chars: int | None, head_fraction: float = 0.5) -> tuple[str, int]:
    """Keep the head and tail of `text` (max_chars characters in all); returns (text, characters cut)."""
    if max_chars is None or len(text) <= max_chars:
        return text, 0
    head = int(max_chars * head_fraction)
    tail = max_chars - head
    cut = len(text) - max_chars
    return f"{text[:head]}\n... [{cut} characters cut by the harness] ...\n{text[len(text) - tail:]}", cut


def content_chars(messages: list[dict[str, Any]]) -> int:
    """Size of a conversation as the context_size trigger measures it (contents and tool-call arguments)."""
    n = 0
    for m in messages:
        n += len(m.get("content") or "")
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") or {}
            n += len(str(fn.get("name") or "")) + len(str(fn.get("arguments") or ""))
    return n


def turn_starts(messages: list[dict[str, Any]]) -> list[int]:
    """Indices of the assistant messages: each starts one turn (which runs to the next assistant message)."""
    return [i for i, m in enumerate(messages) if m.get("role") == "assistant"]


def split_for_window(messages: list[dict[str, Any]], keep_last_turns: int | None) -> tuple[list[dict], list[dict], list[dict]]:
    """(head, older, recent): head = before the first assistant turn; older = turns outside the window."""
    starts = turn_starts(messages)
    if not starts:
        return list(messages), [], []
    head = messages[: starts[0]]
    if keep_last_turns is None or len(starts) <= keep_last_turns:
        return head, [], messages[starts[0]:]
    cut = starts[len(starts) - keep_last_turns]
    return head, messages[starts[0]: cut], messages[cut:]


class ContextCut(BaseModel):
    """What the context policy cut from one model call's view: `messages[start:end]` (whole turns outside the
    window) replaced by one user message whose content is `note` (the omission note or the summary)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    start: int = Field(ge=0)
    end: int = Field(ge=0)
    note: str


def window_cut(messages: list[dict[str, Any]], policy: ContextPolicy, summary: str | None = None) -> ContextCut | None:
    """The cut `keep_last_turns` makes of `messages` (None when everything fits the window)."""
    head, older, _ = split_for_window(messages, policy.keep_last_turns)
    if not older:
        return None
    n_older = len(turn_starts(older))
    if summary:
        note = f"{SUMMARY_PREFIX}\n{summary}"
    else:
        note = f"{OMITTED_PREFIX} {n_older} earlier turn(s) are not shown to save context."
    return ContextCut(start=len(head), end=len(head) + len(older), note=note)


def apply_cut(messages: list[dict[str, Any]], cut: ContextCut | None) -> list[dict[str, Any]]:
    """The messages the model is sent: `messages` with the cut applied (a new list; the input is unchanged)."""
    if cut is None:
        return list(messages)
    return [*messages[: cut.start], {"role": "user", "content": cut.note}, *messages[cut.end:]]


def summary_request(older: list[dict[str, Any]], previous: str | None) -> list[dict[str, Any]]:
    """Messages asking a model to summarize turns that leave the window (folding in the previous summary)."""
    lines = []
    for m in older:
        role = m.get("role")
        if m.get("content"):
            lines.append(f"{role}: {m['content']}")
        for tc in m.get("tool_calls") or []:
            fn = tc.get("function") or {}
            lines.append(f"{role} called {fn.get('name')}({fn.get('arguments')})")
    prior = f"Summary so far:\n{previous}\n\n" if previous else ""
    return [
        {"role": "system", "content": "You condense an agent's work log. Keep facts, ids, numbers, errors and "
                                      "what is still to do. Answer with the summary only, at most 15 lines."},
        {"role": "user", "content": f"{prior}Log to fold in:\n" + "\n".join(lines)},
    ]
