"""website_admin faults: a skipped or forgotten record of a multi-record edit, the shop's conventions (saving,
which reviews and orders count), and the answer's form.

Beliefs change the task as the student understands it (the instance payload the oracle plans from).
Knowledge keys (harness/evolution/cards/website_admin.yaml): save_after_editing, count_all_review_statuses,
bestseller_statuses, answer_with_one_number.
"""

from __future__ import annotations

from collections import Counter
from typing import Any
from urllib.parse import parse_qs, urlparse

from agents.flawed.menu import Action, Belief, FamilyMenu, NotApplicable, Slip
from agents.flawed.views import set_instance_payload
from tasks.records import FinalAnswer, ToolCall
from tasks.shop.data import generate_shop


def _payload(env: Any) -> dict[str, Any]:
    return env.instance.payload


def _items(env: Any) -> list[str]:
    p = _payload(env)
    return [str(c["key"]) for c in p["changes"]] if p["kind"] in ("moderate_reviews", "cancel_pending") else []


def _drop_item(view: Any, unit: str) -> None:
    p = dict(_payload(view))
    p["changes"] = [c for c in p["changes"] if str(c["key"]) != unit]
    if p["kind"] == "moderate_reviews":
        p["steps"] = [s for s in p["steps"] if not s["arguments"]["ref"].endswith(f"-{unit}")]
    else:
        p["per_order"] = [n for n in p["per_order"] if str(n) != unit]
    set_instance_payload(view, p)


def _edits(env: Any) -> list[str]:
    return [""] if _payload(env)["kind"] in ("set_price", "disable_product") else []


def _no_save(view: Any, unit: str) -> None:
    p = dict(_payload(view))
    p["steps"] = [s for s in p["steps"] if s["arguments"].get("ref") != "save"]
    set_instance_payload(view, p)


def _kind(kind: str) -> Any:
    return lambda env: [""] if _payload(env)["kind"] == kind else []


def _approved_only(view: Any, unit: str) -> None:
    p = dict(_payload(view))
    q = parse_qs(urlparse(p["page"]).query)
    sku, rating = q["product"][0], int(q["rating"][0])
    reviews = generate_shop(p["shop_seed"]).reviews
    p["answer"] = {"number": sum(r["sku"] == sku and r["rating"] == rating and r["status"] == "approved"
                                 for r in reviews)}
    set_instance_payload(view, p)


def _all_statuses(view: Any, unit: str) -> None:
    p = dict(_payload(view))
    shop = generate_shop(p["shop_seed"])
    year = p["page"].rsplit("=", 1)[-1]
    orders = {o["id"] for o in shop.orders if o["date"].startswith(year)}
    units: Counter[str] = Counter()
    for it in shop.order_items:
        if it["order_id"] in orders:
            units[it["sku"]] += it["qty"]
    p["answer"] = {"names": [shop.product(sku)["name"] for sku, _ in units.most_common(3)]}
    set_instance_payload(view, p)


def _extra_number(env: Any, action: Action) -> Action:
    want = _payload(env).get("answer", {})
    if not isinstance(action, FinalAnswer) or "number" not in want:
        raise NotApplicable("not a number answer")
    other = want["number"] + (1 if float(want["number"]).is_integer() else 10)
    return FinalAnswer(text=f"{action.text} (the list also showed {other:g} when I first looked)")


def _extra_name(env: Any, action: Action) -> Action:
    want = _payload(env).get("answer", {})
    if not isinstance(action, FinalAnswer) or "names" not in want:
        raise NotApplicable("not a names answer")
    other = next(pr["name"] for pr in generate_shop(_payload(env)["shop_seed"]).products if pr["name"] not in want["names"])
    return FinalAnswer(text=action.text.rstrip(".") + f", and {other}.")


MENU = FamilyMenu(
    family="website_admin",
    beliefs=(
        Belief("skip_item", "planning", _items, _drop_item,
               "leaves record {unit} of the requested edit untouched", cues=("every", "each", "pending")),
        Belief("forget_item", "long_context", _items, _drop_item,
               "forgets record {unit} of the requested edit", cues=("every", "each", "pending")),
        Belief("no_save", "implicit_knowledge", _edits, _no_save,
               "fills the edit form but never clicks save", key="save_after_editing", cues=("save",)),
        Belief("approved_reviews_only", "implicit_knowledge", _kind("review_count"), _approved_only,
               "counts only approved reviews", key="count_all_review_statuses", cues=("status", "pending")),
        Belief("all_order_statuses", "implicit_knowledge", _kind("top_sellers"), _all_statuses,
               "counts cancelled and refunded orders as sales", key="bestseller_statuses",
               cues=("cancelled", "refunded", "status")),
    ),
    slips=(
        Slip("extra_number", "instruction_following", _extra_number, "answered with a second, competing number",
             key="answer_with_one_number", cues=("one number", "single number")),
        Slip("extra_name", "instruction_following", _extra_name, "named a fourth product in the answer",
             cues=("three", "names")),
    ),
    adjacent={
        "fill": lambda c: ToolCall(name="select", arguments={"ref": c.arguments["ref"], "option": c.arguments["text"]}),
        "select": lambda c: ToolCall(name="fill", arguments={"ref": c.arguments["ref"], "text": c.arguments["option"]}),
        "goto": lambda c: ToolCall(name="read_page", arguments={}),
        "click": lambda c: ToolCall(name="press", arguments={"key": "Enter", "ref": c.arguments["ref"]}),
    },
    read_tools=frozenset({"read_page"}),
    write_tools=frozenset({"click", "fill", "select"}),
    not_applicable={
        "planning": "skip_item only on multi-record edits (moderate_reviews, cancel_pending); questions get the "
                    "generic planning faults",
        "implicit_knowledge": "no_save on set_price/disable_product, approved_reviews_only on review_count, "
                              "all_order_statuses on top_sellers; price_of, cancelled_count, customer_spend, "
                              "moderate_reviews and cancel_pending have none",
        "instruction_following": "answers only (extra_number, extra_name); edits have none",
    },
)
