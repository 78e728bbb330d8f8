"""A copy curriculum made of the demonstrations themselves: rename demonstrations with fresh random names.

The code_refactor rename instances draw their two names from a small pool (35 (old, new) pairs over 500
instances), so a small model can lower its loss by writing names typical of the pool instead of reading
them from the instruction (what the first M0 did). `renamed_copies` rewrites a show-your-work rename
demonstration with a new random pair: every word-bounded occurrence of the old and the new name in every
message (instruction, commands, tool outputs, final answer) is replaced consistently, so the copy is as
coherent as the original, and the only way to predict the names in the commands is to copy them from the
instruction. Names are two or three words of `WORDS` joined by underscores, never a word-bounded token of
the original conversation (no collision with another identifier of the workspace).

`resku_copies` does the same for website_admin: the product's SKU (three capitals, a dash, digits) is
replaced everywhere by a fresh one. A build whose website_admin demonstrations had only the shops' few SKU
prefixes (KIT, GAR, OFF, ...) copied the digits and guessed the prefix (`/products/GAR-289` for `KIT-289`,
docs/students.md): fresh prefixes leave copying as the only way to predict it.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import string
from collections.abc import Callable, Sequence
from typing import Any

WORDS = (
    "account", "active", "add", "address", "adjust", "amount", "apply", "average", "balance", "base", "batch",
    "bill", "book", "build", "bundle", "calc", "cart", "charge", "check", "clean", "client", "code", "collect",
    "combine", "compute", "convert", "cost", "count", "credit", "current", "customer", "daily", "date", "debit",
    "default", "delta", "detail", "discount", "draft", "due", "entry", "estimate", "export", "fee", "fetch",
    "filter", "final", "find", "fix", "format", "freight", "full", "get", "gross", "group", "handle", "import",
    "invoice", "item", "join", "last", "ledger", "limit", "line", "list", "load", "make", "margin", "merge",
    "month", "net", "new", "next", "normal", "order", "parse", "part", "pay", "percent", "pick", "plan",
    "post", "prepare", "price", "print", "process", "product", "quote", "rate", "raw", "read", "rebate",
    "record", "reduce", "refund", "render", "report", "resolve", "round", "row", "sale", "scale", "score",
    "select", "ship", "show", "sort", "split", "stock", "store", "sum", "summary", "tally", "tax", "text",
    "total", "unit", "update", "value", "vendor", "week", "weight", "write", "year",
)
_WORD_CHAR = "A-Za-z0-9_"


def _pattern(name: str) -> re.Pattern[str]:
    # word-bounded, where a sed `\b` escape right before the name also counts as a boundary
    return re.compile(rf"(?:(?<=\\b)|(?<![{_WORD_CHAR}])){re.escape(name)}(?![{_WORD_CHAR}])")


def _replace(value: Any, subs: list[tuple[re.Pattern[str], str]]) -> Any:
    """Apply the substitutions to every string in a message, descending into JSON-encoded tool arguments."""
    if isinstance(value, dict):
        return {k: _replace(v, subs) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace(v, subs) for v in value]
    if not isinstance(value, str):
        return value
    if value.startswith("{"):
        try:
            decoded = json.loads(value)
        except ValueError:
            decoded = None
        if isinstance(decoded, dict):
            return json.dumps(_replace(decoded, subs), sort_keys=True)
    for pattern, new in subs:
        value = pattern.sub(new, value)
    return value


def _fresh_name(rng: random.Random, taken: set[str]) -> str:
    while True:
        name = "_".join(rng.sample(WORDS, 3 if rng.random() < 0.3 else 2))
        if name not in taken:
            taken.add(name)
            return name


def fresh_name(rng: random.Random, taken: set[str]) -> str:
    """A fresh identifier of two or three `WORDS` (not in `taken`; added to it)."""
    return _fresh_name(rng, taken)


def _fresh_sku(like: str) -> Callable[[random.Random, set[str]], str]:
    def fresh(rng: random.Random, taken: set[str]) -> str:
        while True:
            sku = "".join(rng.choices(string.ascii_uppercase, k=3)) + "-" + "".join(
                rng.choices(string.digits, k=len(like.split("-", 1)[1])))
            if not any(sku in t for t in taken):  # not even inside a ref such as `edit-KIT-289`
                taken.add(sku)
                return sku
    return fresh


Fresh = Callable[[random.Random, set[str]], str]


def _taken(messages: Sequence[Any]) -> set[str]:
    text = json.dumps(list(messages))
    return set(re.findall(rf"[{_WORD_CHAR}-]+", text)) | set(re.findall(rf"[{_WORD_CHAR}]+", text))


def fresh_like(old: str) -> Fresh:
    """Fresh values shaped like `old`: capitals for a code of capitals (a currency), else an identifier."""
    if old.isalpha() and old.isupper():
        def code(rng: random.Random, taken: set[str]) -> str:
            while (value := "".join(rng.choices(string.ascii_uppercase, k=len(old)))) in taken:
                pass
            taken.add(value)
            return value
        return code
    return _fresh_name


def substitute(messages: Sequence[Any], olds: Sequence[str], fresh: Fresh | Sequence[Fresh], rng: random.Random,
               taken: set[str] | None = None) -> tuple[list[Any], list[str]]:
    """`messages` with every word-bounded occurrence of each of `olds` replaced by a value `fresh` draws (never
    a token of the messages), consistently; and the new values. `fresh`: one drawer, or one per old value."""
    taken = _taken(messages) if taken is None else taken
    drawers = [fresh] * len(olds) if callable(fresh) else list(fresh)
    news = [draw(rng, taken) for draw in drawers]
    subs = [(_pattern(old), new) for old, new in zip(olds, news)]
    return [_replace(m, subs) for m in messages], news


def substituted_copies(trajectory: Any, olds: Sequence[str], fresh: Fresh | Sequence[Fresh],
                       k: int, rng: random.Random, suffix: str) -> list[Any]:
    """`k` copies of a `Trajectory` with every word-bounded occurrence of each of `olds` replaced by a value
    `fresh` draws (never a token of the original conversation), consistently across all messages."""
    taken = _taken(trajectory.messages)
    out = []
    for i in range(k):
        messages, news = substitute(trajectory.messages, olds, fresh, rng, taken)
        digest = hashlib.sha256(f"{trajectory.id}:{i}:{':'.join(news)}".encode()).hexdigest()[:16]
        out.append(trajectory.model_copy(update={"messages": messages, "id": f"{trajectory.id}-aug{digest}",
                                                 "tag": f"{trajectory.tag}:{suffix}"}))
    return out


def renamed_copies(trajectory: Any, old: str, new: str, k: int, rng: random.Random) -> list[Any]:
    """`k` copies of a rename demonstration (a `Trajectory`) with (old, new) replaced by fresh random names."""
    return substituted_copies(trajectory, [old, new], _fresh_name, k, rng, "renamed")


def fresh_code(like: str) -> Fresh:
    """Fresh codes shaped like `like` (three capitals, a dash, as many digits): a SKU, a sensor id."""
    return _fresh_sku(like)


def resku_copies(trajectory: Any, sku: str, k: int, rng: random.Random) -> list[Any]:
    """`k` copies of a website_admin demonstration with the product's SKU replaced by a fresh random one."""
    return substituted_copies(trajectory, [sku], _fresh_sku(sku), k, rng, "resku")
