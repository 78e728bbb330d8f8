"""browser_automation faults: form fields skipped or forgotten, the admin site's conventions (the Active box,
"stock below N", amounts), the request's exact values, and fewer tests than behaviours.

Beliefs change the task as the student understands it (the instance payload the oracle plans from and
judges its own progress by), so it stops once the believed version is done.
Knowledge keys (harness/evolution/cards/browser_automation.yaml): wizard_all_pages, inactive_means_unchecked,
stock_filter_strictly_below, exact_field_values, one_test_per_behaviour.
"""

from __future__ import annotations

import re
from typing import Any

from agents.flawed.menu import Action, Belief, FamilyMenu, NotApplicable, Slip, call_of, with_args
from agents.flawed.views import set_instance_payload
from tasks.records import ToolCall
from tasks.shop.data import generate_shop

FIELD_DEFAULTS = {"description": "", "featured": 0, "min_subtotal_cents": 0, "category": ""}


def _payload(env: Any) -> dict[str, Any]:
    return env.instance.payload


def _row(env: Any) -> dict[str, Any] | None:
    p = _payload(env)
    return p["new_rows"][0]["row"] if p["kind"] in ("discount", "wizard") else None


def _with_row(view: Any, **changes: Any) -> None:
    p = dict(_payload(view))
    new = dict(p["new_rows"][0])
    new["row"] = {**new["row"], **changes}
    p["new_rows"] = [new]
    set_instance_payload(view, p)


def _optional_fields(env: Any) -> list[str]:
    row = _row(env)
    if row is None:
        return []
    names = ("description", "featured") if _payload(env)["kind"] == "wizard" else ("min_subtotal_cents", "category")
    return [f for f in names if row[f]]


def _unsaved_fields(env: Any) -> list[str]:
    """Optional fields, while the row is not saved yet (forgetting later would only make it undo the edit)."""
    row = _row(env)
    if row is None:
        return []
    table, key = ("discount_rules", "code") if _payload(env)["kind"] == "discount" else ("products", "sku")
    return [] if env.query(f"SELECT 1 FROM {table} WHERE {key} = ?", (row[key],)) else _optional_fields(env)


def _restock_targets(p: dict[str, Any], below: int, status: str) -> list[dict[str, Any]]:
    shop = generate_shop(p["shop_seed"])
    cat = p["filters"]["category"]
    return [{"table": "products", "key": pr["sku"], "field": "stock", "value": p["level"]} for pr in shop.products
            if pr["category"] == cat and pr["stock"] < below and (not status or pr["status"] == status)]


def _restock(view: Any, below: int, status: str) -> None:
    p = dict(_payload(view))
    p["filters"] = {**p["filters"], "below": str(below), "status": status}
    p["changes"] = _restock_targets(p, below, status)
    set_instance_payload(view, p)


def _kind(kind: str, pred: Any = lambda p: True) -> Any:
    return lambda env: [""] if _payload(env)["kind"] == kind and pred(_payload(env)) else []


def _fewer_tests(env: Any, action: Action) -> Action:
    call = call_of(action, "write_file")
    if call.arguments.get("path") != "tests/test_lab.py":
        raise NotApplicable("not the test file")
    tests = [m.start() for m in re.finditer(r"^def test_", call.arguments["content"], re.MULTILINE)]
    if len(tests) < 2:
        raise NotApplicable("fewer than two tests")
    return with_args(call, content=call.arguments["content"][: tests[-1]].rstrip() + "\n")


MENU = FamilyMenu(
    family="browser_automation",
    beliefs=(
        Belief("skip_field", "planning", _optional_fields, lambda v, u: _with_row(v, **{u: FIELD_DEFAULTS[u]}),
               "leaves the form field '{unit}' at its default", key="wizard_all_pages", cues=("field", "every")),
        Belief("forget_field", "long_context", _unsaved_fields, lambda v, u: _with_row(v, **{u: FIELD_DEFAULTS[u]}),
               "forgets the requested value of '{unit}' and leaves the field at its default", cues=("field",)),
        Belief("active_flag_flipped", "implicit_knowledge", _kind("discount", lambda p: not p["new_rows"][0]["row"]["active"]),
               lambda v, u: _with_row(v, active=1), "checks the Active box for a rule to be left inactive",
               key="inactive_means_unchecked", cues=("active", "inactive")),
        Belief("stock_at_or_below", "implicit_knowledge", _kind("bulk_stock"),
               lambda v, u: _restock(v, int(_payload(v)["filters"]["below"]) + 1, _payload(v)["filters"]["status"]),
               "reads 'stock below N' as stock <= N", key="stock_filter_strictly_below", cues=("below", "strictly")),
        Belief("restock_any_status", "implicit_knowledge", _kind("bulk_stock", lambda p: bool(p["filters"]["status"])),
               lambda v, u: _restock(v, int(_payload(v)["filters"]["below"]), ""),
               "restocks disabled products too", key="stock_filter_strictly_below", cues=("enabled", "status")),
        Belief("price_in_cents", "implicit_knowledge", _kind("wizard"),
               lambda v, u: _with_row(v, price_cents=_row(v)["price_cents"] * 100),
               "types the price in cents into a field that takes an amount", key="exact_field_values",
               cues=("price", "amount")),
        Belief("code_lowercase", "instruction_following", _kind("discount"),
               lambda v, u: _with_row(v, code=_row(v)["code"].lower()), "types the coupon code in lower case",
               key="exact_field_values", cues=("code", "exactly")),
        Belief("sku_lowercase", "instruction_following", _kind("wizard"),
               lambda v, u: _with_row(v, sku=_row(v)["sku"].lower()), "types the SKU in lower case",
               key="exact_field_values", cues=("sku", "exactly")),
    ),
    slips=(
        Slip("fewer_tests", "instruction_following", _fewer_tests, "wrote one test fewer than the behaviours listed",
             key="one_test_per_behaviour", cues=("test", "behaviour")),
    ),
    adjacent={
        "fill": lambda c: ToolCall(name="select", arguments={"ref": c.arguments["ref"], "option": c.arguments["text"]}),
        "select": lambda c: ToolCall(name="fill", arguments={"ref": c.arguments["ref"], "text": c.arguments["option"]}),
        "goto": lambda c: ToolCall(name="read_page", arguments={}),
        "click": lambda c: ToolCall(name="press", arguments={"key": "Enter", "ref": c.arguments["ref"]}),
        "write_file": lambda c: ToolCall(name="read_file", arguments={"path": c.arguments["path"]}),
    },
    read_tools=frozenset({"read_page", "read_file"}),
    write_tools=frozenset({"click", "fill", "select", "write_file"}),
    not_applicable={
        "planning": "skip_field only where the form has an optional field to fill (hard discount and wizard "
                    "instances); others get the generic planning faults",
        "implicit_knowledge": "active_flag_flipped on inactive discounts, stock_at_or_below / restock_any_status on "
                              "bulk_stock, price_in_cents on wizard; write_tests has none",
        "instruction_following": "bulk_stock has none (no value to type but the level)",
    },
)
