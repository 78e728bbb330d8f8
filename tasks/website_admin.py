"""`website_admin`: WebArena shopping-admin style questions and edits over the shop-admin web app.

Questions are answered in the final message (checked for the exact number or the must-include names);
edits are checked on the database after the episode. Every instance is solved by the oracle through the
same browser tools: sign in (landing on the page that shows the answer or holds the form), then read or
edit. Nine task kinds, easy and hard, cycle by index so every split holds each kind.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from tasks.base import Environment, Family, instance_seed
from tasks.records import FinalAnswer, Step, TaskInstance, ToolCall, Verdict
from tasks.shop_app.data import MUTABLE_TABLES, Shop, generate_shop, money
from tasks.shop_env import ShopEnvironment, login_steps, plan_next
from tasks.shop_tasks import check_names, check_number, diff_checks, initial_tables

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


class WebsiteAdminEnv(ShopEnvironment):
    def verify(self) -> Verdict:
        p = self.instance.payload
        shop = self.shop()
        checks: dict[str, tuple[bool, str]] = {}
        if "answer" in p:
            want = p["answer"]
            if "number" in want:
                ok, why = check_number(self.answer, want["number"], self.instance.instruction)
                checks["answer"] = (ok, why or "")
            else:
                checks.update(check_names(self.answer, want["names"], [x["name"] for x in shop.products]))
            checks.update(diff_checks(initial_tables(shop), self.tables(), []))
        else:
            checks.update(diff_checks(initial_tables(shop), self.tables(), p["changes"]))
        return Verdict.from_checks({k: ok for k, (ok, _) in checks.items()}, {k: why for k, (ok, why) in checks.items()})


class WebsiteAdmin(Family):
    name = "website_admin"
    description = "Shop-admin web app in headless Chromium: answer questions (reports, orders, reviews) and make edits."
    difficulties = ("easy", "hard")

    def generate(self, index: int) -> TaskInstance:
        seed = instance_seed(self.name, index)
        rng = random.Random(seed)
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
        return self.new_instance(index, instruction=instruction, difficulty="hard" if kind in HARD else "easy",
                                 payload=spec)

    def make_env(self, instance: TaskInstance) -> Environment:
        return WebsiteAdminEnv(instance)

    def oracle_action(self, env: Environment, history: Sequence[Step]) -> ToolCall | FinalAnswer:
        assert isinstance(env, WebsiteAdminEnv)
        p = env.instance.payload
        login = login_steps(p["password"], p["page"])
        if "answer" in p:
            want = p["answer"]
            text = (f"{want['number']:.2f}".removesuffix(".00") if "number" in want
                    else "The three best sellers are " + ", ".join(want["names"]) + ".")
            body = [ToolCall(name="read_page", arguments={})]
            return plan_next(login, body, body, history, FinalAnswer(text=text))
        done = FinalAnswer(text="Done.")
        tables = env.tables()
        index = {t: {str(r[MUTABLE_TABLES[t][0]]): r for r in rows} for t, rows in tables.items()}
        todo = [c for c in p["changes"] if index[c["table"]].get(str(c["key"]), {}).get(c["field"]) != c["value"]]
        if not todo:
            return done
        if p["kind"] == "cancel_pending":
            # one order page per pending order: sign in at the first one still to do, then the others by goto
            vocab, body = [], []
            for number in p["per_order"]:
                steps = [ToolCall(name="goto", arguments={"url": f"/orders/{number}"}),
                         ToolCall(name="select", arguments={"ref": "new-status", "option": "cancelled"}),
                         ToolCall(name="click", arguments={"ref": "update-status"})]
                vocab += steps
                if any(c["key"] == number for c in todo):
                    body += steps
            return plan_next(login_steps(p["password"], "/orders"), body, vocab, history, done)
        vocab = [ToolCall(**s) for s in p["steps"]]
        if p["kind"] == "moderate_reviews":
            still = {f"{'approve' if c['value'] == 'approved' else 'reject'}-{c['key']}" for c in todo}
            body = [s for s in vocab if s.arguments["ref"] in still]
        else:
            body = vocab
        return plan_next(login, body, vocab, history, done)
