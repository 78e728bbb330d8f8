"""website_admin data: the seeded question or edit over an instance's shop.

Nine task kinds, easy and hard, cycle by index so every split holds each kind. Questions carry their
answer (a number or the must-include names) and the page that shows it; edits carry the gold changes
(`{table, key, field, value}`) and the page that holds the form.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

from tasks.base import Draft
from tasks.shop.data import Shop, generate_shop, money

PREAMBLE = ("You are the administrator of an online shop. Use the browser tools on the shop's admin site "
            "(start at /login; user 'admin', password '{password}'). ")

QUESTION_KINDS = ("price_of", "cancelled_count", "review_count", "top_sellers", "customer_spend")
EDIT_KINDS = ("set_price", "disable_product", "moderate_reviews", "cancel_pending")
KINDS = ("price_of", "set_price", "cancelled_count", "disable_product", "review_count", "top_sellers",
         "moderate_reviews", "customer_spend", "cancel_pending")
HARD = {"top_sellers", "customer_spend", "moderate_reviews", "cancel_pending"}


def _price_of(rng: random.Random, shop: Shop) -> dict[str, Any]:
    p = rng.choice(shop.products)
    return {"question": f"What is the current price of the product with SKU {p['sku']}? Answer with the amount.",
            "answer": {"number": p["price_cents"] / 100}, "page": f"/products?q={p['sku']}"}


def _cancelled_count(rng: random.Random, shop: Shop) -> dict[str, Any]:
    counts = Counter(o["customer_id"] for o in shop.orders if o["status"] == "cancelled")
    c = shop.customer(rng.choice(sorted(counts)))
    return {"question": f"How many orders placed by the customer {c['name']} have the status 'cancelled'?",
            "answer": {"number": counts[c["id"]]}, "page": f"/orders?customer={c['email']}&status=cancelled"}


def _review_count(rng: random.Random, shop: Shop) -> dict[str, Any]:
    pairs = sorted(Counter((r["sku"], r["rating"]) for r in shop.reviews).items())
    (sku, rating), n = rng.choice(pairs)
    name = shop.product(sku)["name"]
    return {"question": f"How many {rating}-star reviews (whatever their moderation status) does the product "
                        f"'{name}' have?", "answer": {"number": n}, "page": f"/reviews?product={sku}&rating={rating}"}


def _top_sellers(rng: random.Random, shop: Shop) -> dict[str, Any] | None:
    years = [y for y in (2022, 2023, 2024) if len(u := shop.units_sold(y).most_common(4)) == 4 and u[2][1] > u[3][1]]
    if not years:
        return None
    year = rng.choice(years)
    top = [shop.product(sku)["name"] for sku, _ in shop.units_sold(year).most_common(3)]
    return {"question": f"Which three products sold the most units in {year}? Count orders that are pending, "
                        "processing or complete (not cancelled or refunded). Give the three product names.",
            "answer": {"names": top}, "page": f"/reports/bestsellers?year={year}"}


def _customer_spend(rng: random.Random, shop: Shop) -> dict[str, Any]:
    totals: Counter[tuple[int, str]] = Counter()
    n: Counter[tuple[int, str]] = Counter()
    for o in shop.orders:
        if o["status"] == "complete":
            totals[(o["customer_id"], o["date"][:4])] += o["total_cents"]
            n[(o["customer_id"], o["date"][:4])] += 1
    cid, year = rng.choice(sorted(k for k in n if n[k] >= 2) or sorted(n))
    c = shop.customer(cid)
    return {"question": f"What is the total value of all orders with status 'complete' that {c['name']} placed "
                        f"in {year}? Answer with the amount.", "answer": {"number": totals[(cid, year)] / 100},
            "page": f"/orders?customer={c['email']}&status=complete&year={year}"}


def _set_price(rng: random.Random, shop: Shop) -> dict[str, Any]:
    p = rng.choice(shop.products)
    new = p["price_cents"] + rng.choice((-1, 1)) * rng.randint(1, 20) * 50
    new = new if new > 0 else p["price_cents"] + 150
    return {"question": f"Set the price of the product with SKU {p['sku']} to {money(new)}. Change nothing else.",
            "changes": [{"table": "products", "key": p["sku"], "field": "price_cents", "value": new}],
            "page": f"/products/{p['sku']}",
            "steps": [{"name": "fill", "arguments": {"ref": "price", "text": money(new)}}, {"name": "click", "arguments": {"ref": "save"}}]}


def _disable_product(rng: random.Random, shop: Shop) -> dict[str, Any]:
    p = rng.choice([p for p in shop.products if p["status"] == "enabled"])
    return {"question": f"The product '{p['name']}' has been discontinued: set its status to disabled. "
                        "Change nothing else.",
            "changes": [{"table": "products", "key": p["sku"], "field": "status", "value": "disabled"}],
            "page": f"/products/{p['sku']}",
            "steps": [{"name": "select", "arguments": {"ref": "status", "option": "disabled"}}, {"name": "click", "arguments": {"ref": "save"}}]}


def _moderate_reviews(rng: random.Random, shop: Shop) -> dict[str, Any]:
    per: dict[str, list[dict]] = {}
    for r in shop.reviews:
        if r["status"] == "pending" and r["rating"] != 3:
            per.setdefault(r["sku"], []).append(r)
    sku = rng.choice(sorted(per, key=lambda s: (-len(per[s]), s))[:4])
    targets = sorted(per[sku], key=lambda r: r["id"])
    name = shop.product(sku)["name"]
    return {"question": f"Moderate the pending reviews of the product '{name}': approve every pending review "
                        "rated 4 or 5 stars and reject every pending review rated 1 or 2 stars. Leave 3-star "
                        "reviews pending and change nothing else.",
            "changes": [{"table": "reviews", "key": r["id"], "field": "status",
                         "value": "approved" if r["rating"] >= 4 else "rejected"} for r in targets],
            "page": f"/reviews?product={sku}&status=pending",
            "steps": [{"name": "click", "arguments": {"ref": f"{'approve' if r['rating'] >= 4 else 'reject'}-{r['id']}"}}
                      for r in targets]}


def _cancel_pending(rng: random.Random, shop: Shop) -> dict[str, Any]:
    pending: dict[int, list[dict]] = {}
    for o in shop.orders:
        if o["status"] == "pending":
            pending.setdefault(o["customer_id"], []).append(o)
    cid = rng.choice(sorted(pending))
    c = shop.customer(cid)
    return {"question": f"The customer {c['name']} asked us to cancel everything that is still pending: set the "
                        "status of each of their pending orders to cancelled. Leave their other orders as they are.",
            "changes": [{"table": "orders", "key": o["number"], "field": "status", "value": "cancelled"}
                        for o in pending[cid]],
            "page": f"/orders?customer={c['email']}&status=pending", "per_order": [o["number"] for o in pending[cid]]}


BUILDERS: dict[str, Callable[[random.Random, Shop], dict[str, Any] | None]] = {
    "price_of": _price_of, "cancelled_count": _cancelled_count, "review_count": _review_count,
    "top_sellers": _top_sellers, "customer_spend": _customer_spend, "set_price": _set_price,
    "disable_product": _disable_product, "moderate_reviews": _moderate_reviews, "cancel_pending": _cancel_pending,
}


def draft(index: int, rng: random.Random) -> Draft:
    shop_seed = rng.randrange(2**31)
    shop = generate_shop(shop_seed)
    kind = KINDS[index % len(KINDS)]
    spec = BUILDERS[kind](rng, shop)
    if spec is None:  # no clear top-3 in any year: ask a price instead (rare, still deterministic)
        kind, spec = "price_of", _price_of(rng, shop)
    password = f"shop-{rng.randint(1000, 9999)}"
    spec = {"kind": kind, "shop_seed": shop_seed, "password": password, **spec}
    instruction = PREAMBLE.format(password=password) + spec["question"] + (
        " When you are done, reply with the answer." if "answer" in spec else " When you are done, say so.")
    return Draft(instruction=instruction, difficulty="hard" if kind in HARD else "easy", payload=spec)
