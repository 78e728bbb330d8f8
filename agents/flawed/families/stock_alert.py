"""stock_alert faults: skipped or forgotten inventory pages, the low-stock conventions, sheet and email format.

Knowledge keys (harness/evolution/cards/stock_alert.yaml): read_every_page, low_stock_at_or_below,
per_product_reorder_level, skip_discontinued, exact_sheet_columns, fill_every_placeholder.
"""

from __future__ import annotations

from typing import Any

from agents.flawed.menu import Action, Belief, FamilyMenu, NotApplicable, Slip, call_of, with_args
from agents.flawed.views import set_payload
from tasks.records import ToolCall
from tasks.stock_alert.data import PAGE_SIZE, StockPayload, threshold_of

NOT_LOW = 10**6  # a stock no threshold reaches: the believed stock of a product the student does not know


def _pages_after_first(env: Any) -> list[str]:
    return [str(k) for k in range(2, env.n_pages() + 1)]


def _pages_read(env: Any) -> list[str]:
    """Pages read, while nothing is written yet (forgetting later would only make it undo its rows)."""
    if any(sheet["rows"] for sheet in env.sheets.values()):
        return []
    return [str(k) for k in sorted(env.pages_seen)]


def _hide_page(view: Any, unit: str, mark_read: bool) -> None:
    page = int(unit)
    p: StockPayload = view.payload
    lo, hi = (page - 1) * PAGE_SIZE, page * PAGE_SIZE
    products = [pr.model_copy(update={"stock": NOT_LOW}) if lo <= i < hi else pr for i, pr in enumerate(p.products)]
    set_payload(view, products=products)
    if mark_read:
        view.pages_seen = view.pages_seen | {page}


def _exclusive_bound(view: Any, unit: str) -> None:
    p: StockPayload = view.payload
    set_payload(view, products=[pr.model_copy(update={"stock": pr.stock + 1}) if pr.stock == threshold_of(p, pr) else pr
                                for pr in p.products])


def _hard_only(env: Any) -> list[str]:
    return [""] if env.payload.global_threshold is None else []


def _global_threshold(view: Any, unit: str) -> None:
    set_payload(view, global_threshold=10)


def _include_discontinued(view: Any, unit: str) -> None:
    set_payload(view, skip_discontinued=False)


def _supplier_ids(view: Any, unit: str) -> None:
    set_payload(view, suppliers=[s.model_copy(update={"name": s.id}) for s in view.payload.suppliers])


def _wrong_columns(env: Any, action: Action) -> Action:
    call = call_of(action, "create_sheet")
    cols = list(call.arguments["columns"])
    cols[1] = {"Product": "Product Name"}.get(cols[1], cols[1] + " name")
    return with_args(call, columns=cols)


def _placeholder_left(env: Any, action: Action) -> Action:
    call = call_of(action, "send_email")
    store = env.payload.store
    if store not in call.arguments["body"]:
        raise NotApplicable("the body does not name the store")
    return with_args(call, body=call.arguments["body"].replace(store, "{store}"))


def _read_page(history: Any, page: int) -> bool:
    return any(s.call.name == "list_products" and isinstance(s.call.arguments, dict)
               and s.call.arguments.get("page", 1) == page and not s.result.is_error for s in history)


MENU = FamilyMenu(
    family="stock_alert",
    beliefs=(
        Belief("skip_page", "planning", _pages_after_first, lambda v, u: _hide_page(v, u, mark_read=True),
               "never reads inventory page {unit}; its low-stock products are missing from the sheet and emails",
               key="read_every_page", cues=("page",)),
        Belief("forget_page", "long_context", _pages_read, lambda v, u: _hide_page(v, u, mark_read=False),
               "forgets the products of inventory page {unit} it read earlier", cues=("page",),
               retrieved=lambda env, history, u: _read_page(history, int(u))),
        Belief("exclusive_bound", "implicit_knowledge", lambda env: [""], _exclusive_bound,
               "treats 'low stock' as stock < threshold: products exactly at the threshold are left out",
               key="low_stock_at_or_below", cues=("at or below", "threshold", "<=")),
        Belief("global_threshold", "implicit_knowledge", _hard_only, _global_threshold,
               "applies one global threshold of 10 instead of each product's reorder level",
               key="per_product_reorder_level", cues=("reorder level", "reorder_level")),
        Belief("include_discontinued", "implicit_knowledge", _hard_only, _include_discontinued,
               "does not skip discontinued products (sheet rows and emails for them)",
               key="skip_discontinued", cues=("discontinued",)),
        Belief("supplier_id_as_name", "implicit_knowledge", lambda env: [""], _supplier_ids,
               "writes the supplier's id where its name belongs (sheet and email greeting)",
               key="exact_sheet_columns", cues=("supplier",)),
    ),
    slips=(
        Slip("wrong_columns", "instruction_following", _wrong_columns,
             "created the sheet with a renamed column", key="exact_sheet_columns", cues=("column",)),
        Slip("placeholder_left", "instruction_following", _placeholder_left,
             "sent an alert with the {store} placeholder unfilled (emails cannot be recalled)",
             key="fill_every_placeholder", cues=("placeholder", "template")),
    ),
    adjacent={
        "list_sheets": lambda c: ToolCall(name="read_sheet", arguments={"title": "Sheet1"}),
        "read_sheet": lambda c: ToolCall(name="list_sheets", arguments={}),
        "delete_rows": lambda c: ToolCall(name="delete_sheet", arguments={"title": c.arguments["title"]}),
        "append_rows": lambda c: ToolCall(name="read_sheet", arguments={"title": c.arguments["title"]}),
        "send_email": lambda c: ToolCall(name="list_outbox", arguments={}),
        "list_suppliers": lambda c: ToolCall(name="list_products", arguments={"page": 1}),
        "get_email_template": lambda c: ToolCall(name="list_outbox", arguments={}),
    },
    read_tools=frozenset({"list_products", "list_suppliers", "get_email_template", "list_sheets", "read_sheet",
                          "list_outbox"}),
    write_tools=frozenset({"create_sheet", "append_rows", "send_email", "delete_rows", "delete_sheet"}),
    not_applicable={
        "planning": "skip_page needs a second page (hard instances); easy ones get the generic planning faults",
        "implicit_knowledge": "global_threshold and include_discontinued only on hard instances",
    },
)
