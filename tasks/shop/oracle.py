"""The oracle's navigation for both browser families: sign in (landing on the task's page), then the
task's steps, planned from the current state and resumed after the longest overlap with what was done."""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlencode

from tasks.records import FinalAnswer, Step, ToolCall


def login_steps(password: str, next_path: str) -> list[ToolCall]:
    """The oracle's sign-in: four actions that work from any state (the login page always shows the form)."""
    return [
        ToolCall(name="goto", arguments={"url": "/login?" + urlencode({"next": next_path})}),
        ToolCall(name="fill", arguments={"ref": "username", "text": "admin"}),
        ToolCall(name="fill", arguments={"ref": "password", "text": password}),
        ToolCall(name="click", arguments={"ref": "sign-in"}),
    ]


def plan_next(login: Sequence[ToolCall], body: Sequence[ToolCall], vocab: Sequence[ToolCall],
              history: Sequence[Step], final: FinalAnswer) -> ToolCall | FinalAnswer:
    """The oracle's next step: sign in (landing on the task's page), then run `body`.

    `body` is planned from the *current* state (so finished parts drop out), `vocab` lists every body step
    the task may use. After the last complete, error-free sign-in, if every later step is error-free and
    in `vocab`, we are still on the task's page: continue `body` after the longest overlap between those
    steps' tail and `body`'s head. Anything else (an error, a foreign action) restarts with the sign-in,
    which works from any page. An exhausted body ends the episode with `final`.
    """
    n = len(login)
    ok = [not s.result.is_error for s in history]
    calls = [(s.call.name, s.call.arguments) for s in history]
    key = [(c.name, c.arguments) for c in login]
    last = -1
    for i in range(len(history) - n, -1, -1):
        if calls[i:i + n] == key and all(ok[i:i + n]):
            last = i + n
            break
    if last < 0:
        for k in range(min(n - 1, len(history)), 0, -1):  # part-way through the sign-in
            if calls[-k:] == key[:k] and all(ok[-k:]):
                return login[k]
        return login[0] if login else (body[0] if body else final)
    done = history[last:]
    allowed = [(c.name, c.arguments) for c in vocab]
    if not all(s_ok and c in allowed for s_ok, c in zip(ok[last:], calls[last:], strict=True)):
        return login[0]
    plan = [(c.name, c.arguments) for c in body]
    for j in range(min(len(done), len(plan)), 0, -1):
        if calls[-j:] == plan[:j]:
            return body[j] if j < len(body) else final
    return body[0] if body else final
