"""website_admin, a show-your-work demonstration policy (for training the micro student; the pure oracle in
oracle.py is unchanged and stays the reference).

It covers the kinds whose every written value the trajectory shows before it is written:
- `price_of`: sign in landing on `/products?q=<SKU from the instruction>`, `read_page`, answer the price the
  result row shows (the oracle's own path);
- `set_price`: sign in landing on `/products/<SKU>`, fill the price, save: the SKU and the price are copies
  from the instruction (the oracle's own path);
- `disable_product`: the instruction names the product, not its SKU, and the oracle goes straight to
  `/products/<SKU>` from the payload; here it signs in landing on `/products?q=<name>`, reads the page (the
  result row shows the SKU), then goes to `/products/<SKU>`, selects `disabled` and saves.
The other kinds need a value the trajectory does not show first (a customer's e-mail address or a product's
SKU derived from a name, order numbers never listed): not covered, like code_refactor's non-rename kinds.
No knowledge item of the card is tied to a choice here (`knows` is accepted and unused).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import quote_plus

from tasks.records import FinalAnswer, Step, TaskInstance, ToolCall
from tasks.shop.data import MUTABLE_TABLES
from tasks.shop.oracle import login_steps, plan_next
from tasks.website_admin import oracle
from tasks.website_admin.env import WebsiteAdminEnv

COVERED = ("price_of", "set_price", "disable_product")
_NAMED = re.compile(r"The product '([^']+)' has been discontinued")
_ROW = re.compile(r"^\s*\| ([A-Z]{3}-\d+) \| ", re.MULTILINE)


def applies(instance: TaskInstance) -> bool:
    return instance.family == "website_admin" and instance.payload.get("kind") in COVERED


def _sku_shown(history: Sequence[Step]) -> str | None:
    """The SKU of the first result row of the last page read (the search for the product's name)."""
    for step in reversed(history):
        if step.call.name == "read_page" and not step.result.is_error:
            m = _ROW.search(step.result.content)
            return m.group(1) if m else None
    return None


def _todo(env: WebsiteAdminEnv) -> list[dict[str, object]]:
    """The payload's changes the shop's database does not hold yet (as the oracle plans them)."""
    tables = env.tables()
    index = {t: {str(r[MUTABLE_TABLES[t][0]]): r for r in rows} for t, rows in tables.items()}
    return [c for c in env.instance.payload["changes"]
            if index[c["table"]].get(str(c["key"]), {}).get(c["field"]) != c["value"]]


def next_action(env: WebsiteAdminEnv, history: Sequence[Step],
                knows: frozenset[str] = frozenset()) -> ToolCall | FinalAnswer:
    p = env.instance.payload
    if p["kind"] != "disable_product":
        return oracle.next_action(env, history)
    name = _NAMED.search(env.instance.instruction)
    assert name, "disable_product instruction without a product name"
    done = FinalAnswer(text="Done.")
    if not _todo(env):
        return done
    read = ToolCall(name="read_page", arguments={})
    sku = _sku_shown(history)
    edit = [] if sku is None else [ToolCall(name="goto", arguments={"url": f"/products/{sku}"}),
                                   ToolCall(name="select", arguments={"ref": "status", "option": "disabled"}),
                                   ToolCall(name="click", arguments={"ref": "save"})]
    body = [read, *edit]
    return plan_next(login_steps(p["password"], f"/products?q={quote_plus(name.group(1))}"), body, body, history, done)
