"""website_admin, a show-your-work demonstration policy (for training the micro student; the pure oracle in
oracle.py is unchanged and stays the reference).

Every call starts from a plain sign-in (`goto /login`, the user, the password from the instruction, `sign-in`),
not the oracle's `/login?next=<URL-encoded page>`: a third M0 build (docs/students.md) copied the SKU into that
encoded path wrongly (`/products%2money-289` for `KIT-289`); here each value is copied verbatim, once, into
the call that needs it. It covers the kinds whose every written value the trajectory shows before it is written:
- `price_of`: `goto /products?q=<SKU from the instruction>`, `read_page`, answer the price the SKU's result
  row shows;
- `set_price`: `goto /products/<SKU>`, fill the price, save: the SKU and the price are copies from the
  instruction;
- `disable_product`: the instruction names the product, not its SKU (the oracle goes straight to
  `/products/<SKU>` from the payload): `goto /products`, fill the search box with the name, apply the filter,
  `read_page` (the result row shows the SKU), then `goto /products/<SKU>`, select `disabled`, save.
The other kinds need a value the trajectory does not show first (a customer's e-mail address or a product's
SKU derived from a name, order numbers never listed): not covered, like code_refactor's non-rename kinds.
No knowledge item of the card is tied to a choice here (`knows` is accepted and unused).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tasks.records import FinalAnswer, Step, TaskInstance, ToolCall
from tasks.shop.data import MUTABLE_TABLES
from tasks.shop.oracle import plan_next
from tasks.website_admin.env import WebsiteAdminEnv

COVERED = ("price_of", "set_price", "disable_product")
_NAMED = re.compile(r"The product '([^']+)' has been discontinued")
_SKU = re.compile(r"with SKU ([A-Z]{3}-\d+)")
_NEW_PRICE = re.compile(r" to (\d+(?:\.\d+)?)\. Change nothing else")
_ROW = re.compile(r"^\s*\| ([A-Z]{3}-\d+) \| (.*)$", re.MULTILINE)


def applies(instance: TaskInstance) -> bool:
    return instance.family == "website_admin" and instance.payload.get("kind") in COVERED


def sku_of(instance: TaskInstance) -> str:
    """The SKU of the product a covered instance is about (for fresh-SKU copies of its demonstration)."""
    changes = instance.payload.get("changes")
    return str(changes[0]["key"]) if changes else _needed(_SKU, instance.instruction)


def sign_in(password: str) -> list[ToolCall]:
    """Four actions that work from any state; the shop lands on its dashboard."""
    return [ToolCall(name="goto", arguments={"url": "/login"}),
            ToolCall(name="fill", arguments={"ref": "username", "text": "admin"}),
            ToolCall(name="fill", arguments={"ref": "password", "text": password}),
            ToolCall(name="click", arguments={"ref": "sign-in"})]


def _rows_shown(history: Sequence[Step]) -> list[tuple[str, list[str]]]:
    """(SKU, the row's other cells) of every result row of the last page read."""
    for step in reversed(history):
        if step.call.name == "read_page" and not step.result.is_error:
            return [(m.group(1), [c.strip() for c in m.group(2).split("|")]) for m in _ROW.finditer(step.result.content)]
    return []


def _todo(env: WebsiteAdminEnv) -> list[dict[str, object]]:
    """The payload's changes the shop's database does not hold yet (as the oracle plans them)."""
    tables = env.tables()
    index = {t: {str(r[MUTABLE_TABLES[t][0]]): r for r in rows} for t, rows in tables.items()}
    return [c for c in env.instance.payload["changes"]
            if index[c["table"]].get(str(c["key"]), {}).get(c["field"]) != c["value"]]


def _needed(pattern: re.Pattern[str], instruction: str) -> str:
    m = pattern.search(instruction)
    assert m, f"website_admin instruction without {pattern.pattern!r}"
    return m.group(1)


def _price_of(instruction: str, history: Sequence[Step]) -> tuple[list[ToolCall], FinalAnswer]:
    sku = _needed(_SKU, instruction)
    body = [ToolCall(name="goto", arguments={"url": f"/products?q={sku}"}), ToolCall(name="read_page", arguments={})]
    price = next((cells[2] for s, cells in _rows_shown(history) if s == sku and len(cells) > 2), "")
    return body, FinalAnswer(text=price or "I could not find that product.")


def _disable(instruction: str, history: Sequence[Step]) -> list[ToolCall]:
    name = _needed(_NAMED, instruction)
    search = [ToolCall(name="goto", arguments={"url": "/products"}),
              ToolCall(name="fill", arguments={"ref": "q", "text": name}),
              ToolCall(name="click", arguments={"ref": "apply-filters"}),
              ToolCall(name="read_page", arguments={})]
    sku = next((s for s, cells in _rows_shown(history) if cells and cells[0] == name), None)
    return search + ([] if sku is None else [ToolCall(name="goto", arguments={"url": f"/products/{sku}"}),
                                             ToolCall(name="select", arguments={"ref": "status", "option": "disabled"}),
                                             ToolCall(name="click", arguments={"ref": "save"})])


def next_action(env: WebsiteAdminEnv, history: Sequence[Step],
                knows: frozenset[str] = frozenset()) -> ToolCall | FinalAnswer:
    p, text = env.instance.payload, env.instance.instruction
    login = sign_in(p["password"])
    if p["kind"] == "price_of":
        body, answer = _price_of(text, history)
        return plan_next(login, body, body, history, answer)
    done = FinalAnswer(text="Done.")
    if not _todo(env):
        return done
    if p["kind"] == "set_price":
        sku = _needed(_SKU, text)
        body = [ToolCall(name="goto", arguments={"url": f"/products/{sku}"}),
                ToolCall(name="fill", arguments={"ref": "price", "text": _needed(_NEW_PRICE, text)}),
                ToolCall(name="click", arguments={"ref": "save"})]
    else:
        body = _disable(text, history)
    return plan_next(login, body, body, history, done)
