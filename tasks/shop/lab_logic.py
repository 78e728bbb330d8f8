"""The behaviour of the lab pages, served by `/lab/api`: the page itself is only a renderer (the same HTML for
the correct page and every seeded fault), and every decision (the next count, whether an item is added, which
error shows) is answered here, by the correct logic or by one seeded fault of one specified behaviour.

Why on the server: a written test is judged by whether it passes on the correct page and fails on a fault
(`tasks.shop.lab_mutants`). When the faults lived in the page's script, a test comparing the page's source
with the one it saw during the episode (or looking for one line of it) "caught" every fault without testing
any behaviour. Now nothing the browser receives differs between variants except the answers to actions, so
the only way to tell a fault from the correct page is to act and check the result against the specification.

`answer(lab, action, state, fault)` is pure: the client sends the state it shows (the count, the list, the
last error), so the server keeps nothing between requests. Fault 0 is the correct page; fault k (1-based)
breaks the k-th behaviour the prompt lists.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_ITEMS = 200
MAX_TEXT = 2_000
MAX_NUMBER = 10**9
_EMAIL_RE = re.compile(r"[^@\s]+@[^@\s]+\.[a-z]+")


class LabRequestError(ValueError):
    """A request the page itself never sends (unknown action, a state out of range): answered with 400."""


def answer(kind: str, params: dict[str, Any], action: str, state: dict[str, Any], fault: int) -> dict[str, Any]:
    """The response to `action` from a page showing `state`, under `fault` (0: the correct page)."""
    handler = _KINDS.get(kind)
    if handler is None:
        raise LabRequestError(f"unknown lab page kind {kind!r}")
    return handler(params, action, state, fault)


def parse_state(text: str) -> dict[str, Any]:
    """The posted `state` field: a JSON object of at most 64 KiB."""
    if len(text) > 65_536:
        raise LabRequestError("state is too large")
    try:
        state = json.loads(text or "{}")
    except (json.JSONDecodeError, RecursionError) as e:
        raise LabRequestError(f"state is not JSON: {e}") from None
    if not isinstance(state, dict):
        raise LabRequestError("state must be a JSON object")
    return state


def _number(state: dict[str, Any], key: str) -> int:
    value = state.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or abs(value) > MAX_NUMBER:
        raise LabRequestError(f"{key} must be a whole number of at most {MAX_NUMBER}")
    return value


def _text(state: dict[str, Any], key: str) -> str:
    value = state.get(key, "")
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise LabRequestError(f"{key} must be a string of at most {MAX_TEXT} characters")
    return value


def _items(state: dict[str, Any]) -> list[dict[str, Any]]:
    items = state.get("items")
    if not isinstance(items, list) or len(items) > MAX_ITEMS:
        raise LabRequestError(f"items must be a list of at most {MAX_ITEMS} items")
    out = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("done"), bool):
            raise LabRequestError("each item must be an object with 'text' and a boolean 'done'")
        out.append({"text": _text(item, "text"), "done": item["done"]})
    return out


def _index(state: dict[str, Any], items: list[dict[str, Any]]) -> int:
    i = _number(state, "index")
    if not 0 <= i < len(items):
        raise LabRequestError(f"index {i} is not an item of the list")
    return i


# --- counter: faults 1 start, 2 step, 3 floor, 4 maximum, 5 reset, 6 'At zero' -------------------------------
def _counter(p: dict[str, Any], action: str, state: dict[str, Any], fault: int) -> dict[str, Any]:
    start, step, top = p["start"], p["step"], p["max"]
    if action == "init":
        n = start + 1 if fault == 1 else start
    elif action == "inc":
        n = _number(state, "n")
        n = n + step if fault == 4 else min(top, n + step + (1 if fault == 2 else 0))
    elif action == "dec":
        n = _number(state, "n")
        n = n - step if fault == 3 else max(0, n - step)
    elif action == "reset":
        n = _number(state, "n") if fault == 5 else start
    else:
        raise LabRequestError(f"unknown action {action!r}; the counter page sends init, inc, dec, reset")
    message = "Maximum reached" if n >= top else ("At zero" if n == 0 and fault != 6 else "")
    return {"n": n, "message": message}


# --- to-do list: faults 1 remaining count, 2 input cleared, 3 blank refused, 4 toggle recounts, 5 delete,
# 6 length limit ---------------------------------------------------------------------------------------------
def _remaining(items: list[dict[str, Any]], fault: int) -> str:
    n = sum(not item["done"] for item in items)
    if fault == 1:
        return f"{n + 1} items left"
    return f"{n} item left" if n == 1 else f"{n} items left"


def _todo(p: dict[str, Any], action: str, state: dict[str, Any], fault: int) -> dict[str, Any]:
    if action == "init":
        items = [{"text": t, "done": False} for t in p["items"]]
        return {"items": items, "remaining": _remaining(items, fault), "error": "", "input": ""}
    items = _items(state)
    if action == "add":
        return _todo_add(p, items, _text(state, "input"), fault)
    if action == "toggle":
        i = _index(state, items)
        if fault == 4:  # the count is not updated: it still counts the item as it was before the click
            items[i] = {**items[i], "done": not items[i]["done"]}
        return {"remaining": _remaining(items, fault)}
    if action == "delete":
        i = _index(state, items)
        if fault != 5:
            items = items[:i] + items[i + 1:]
        return {"items": items, "remaining": _remaining(items, fault)}
    raise LabRequestError(f"unknown action {action!r}; the to-do page sends init, add, toggle, delete")


def _todo_add(p: dict[str, Any], items: list[dict[str, Any]], raw: str, fault: int) -> dict[str, Any]:
    text, error, cleared = raw.strip(), "", raw
    limit = p["limit"] + (100 if fault == 6 else 0)
    if not text:
        error = "Item text is required"
    elif len(text) > limit:
        error = "Item text is too long"
    if not error or (fault == 3 and not text):
        if len(items) >= MAX_ITEMS:
            raise LabRequestError(f"the list already holds {MAX_ITEMS} items")
        items = [*items, {"text": text, "done": False}]
        cleared = raw if fault == 2 else ""
    return {"items": items, "remaining": _remaining(items, fault), "error": error, "input": cleared}


# --- sign-up form: faults 1 email, 2 length, 3 match, 4 welcome text, 5 error cleared, 6 digit ----------------
def _signup(p: dict[str, Any], action: str, state: dict[str, Any], fault: int) -> dict[str, Any]:
    if action != "submit":
        raise LabRequestError(f"unknown action {action!r}; the sign-up page sends submit")
    email, password, confirm = (_text(state, k) for k in ("email", "password", "confirm"))
    error = ""
    if fault != 1 and not _EMAIL_RE.fullmatch(email):
        error = "Enter a valid email address"
    elif len(password) < (2 if fault == 2 else p["min_length"]):
        error = f"Password must be at least {p['min_length']} characters"
    elif p["digit"] and fault != 6 and not re.search(r"[0-9]", password):
        error = "Password must contain a digit"
    elif fault != 3 and password != confirm:
        error = "Passwords do not match"
    result = "" if error else f"Welcome, {email}" + ("" if fault == 4 else "!")
    if fault == 5 and not error:  # a successful submission leaves the previous error showing
        error = _text(state, "error")
    return {"error": error, "result": result}


_KINDS = {"counter": _counter, "todo": _todo, "signup": _signup}
