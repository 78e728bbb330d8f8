"""browser_automation data: the seeded workflow over an instance's shop (create a discount rule,
bulk-update stock for a filtered list, the three-page new-product form: gold changes and new rows), or
the test-writing variant (a generated lab page whose behaviours the prompt lists).

Kinds cycle by index (25 each); difficulty is drawn per instance (more fields / more filters / one more
behaviour when hard).
"""

from __future__ import annotations

import random
from typing import Any

from tasks.base import Draft
from tasks.shop.data import CATEGORIES, Shop, generate_shop, money
from tasks.shop.lab_pages import LabPage, make_lab_page

KINDS = ("discount", "bulk_stock", "wizard", "write_tests")
PREAMBLE = ("You operate the admin site of an online shop with the browser tools (start at /login; user "
            "'admin', password '{password}'). ")
_WORDS = ("Spring", "Summer", "Autumn", "Winter", "Flash", "Loyalty", "Welcome", "Weekend", "Clearance", "Holiday")
_DESCR = ("Hand finished", "Limited run", "Recycled materials", "Gift boxed", "Locally made")


def _discount(rng: random.Random, shop: Shop, hard: bool) -> dict[str, Any]:
    word = rng.choice(_WORDS)
    taken = {r["code"] for r in shop.discount_rules}
    code = next(c for c in (f"{word.upper()}{rng.randint(10, 99)}" for _ in range(100)) if c not in taken)
    month = rng.randint(1, 9)
    row = {"name": f"{word} sale {rng.randint(1, 9)}", "code": code, "percent": rng.choice((5, 10, 12, 15, 20, 25, 30)),
           "min_subtotal_cents": rng.choice((2500, 4000, 7500, 10000)) if hard else 0,
           "category": rng.choice(CATEGORIES) if hard else "", "active": 0 if hard and rng.random() < 0.4 else 1,
           "starts": f"2025-{month:02d}-{rng.randint(1, 9):02d}", "ends": f"2025-{month + rng.randint(1, 3):02d}-{rng.randint(10, 28):02d}"}
    text = (f"Create a discount rule named '{row['name']}' with coupon code {code}, {row['percent']}% off, valid from "
            f"{row['starts']} to {row['ends']}")
    if hard:
        text += (f", for orders of at least {money(row['min_subtotal_cents'])} in the {row['category']} category, "
                 + ("and leave it inactive for now" if not row["active"] else "and make it active"))
    else:
        text += ", for any category with no minimum subtotal, and make it active"
    return {"question": text + ".", "new_rows": [{"table": "discount_rules", "row": row}], "changes": []}


def _bulk_stock(rng: random.Random, shop: Shop, hard: bool) -> dict[str, Any] | None:
    for _ in range(50):
        cat, below = rng.choice(CATEGORIES), rng.choice((5, 8, 10, 15, 20))
        status = "enabled" if hard else ""
        targets = [p for p in shop.products if p["category"] == cat and p["stock"] < below
                   and (not status or p["status"] == status)]
        others = [p for p in shop.products if p["category"] == cat and p not in targets]
        if len(targets) >= 2 and others:
            level = rng.choice((25, 30, 40, 50))
            text = (f"Restock: set the stock of every {'enabled ' if hard else ''}product in the {cat} category whose "
                    f"stock is below {below} to {level}. Leave all other products unchanged.")
            return {"question": text, "filters": {"category": cat, "below": str(below), "status": status},
                    "level": level, "new_rows": [],
                    "changes": [{"table": "products", "key": p["sku"], "field": "stock", "value": level} for p in targets]}
    return None


def _wizard(rng: random.Random, shop: Shop, hard: bool) -> dict[str, Any]:
    cat = rng.choice(CATEGORIES)
    taken = {p["sku"] for p in shop.products}
    sku = next(s for s in (f"{cat[:3].upper()}-{rng.randint(1000, 9999)}" for _ in range(100)) if s not in taken)
    names = {p["name"] for p in shop.products}
    name = next(n for n in (f"{rng.choice(_WORDS)} {rng.choice(('Tray', 'Lamp', 'Basket', 'Clock', 'Scarf'))}"
                            for _ in range(100)) if n not in names)
    row = {"sku": sku, "name": name, "category": cat, "price_cents": rng.randint(5, 90) * 100 + rng.choice((0, 50, 99)),
           "stock": rng.randint(1, 60), "status": "disabled" if hard and rng.random() < 0.5 else "enabled",
           "description": rng.choice(_DESCR) if hard else "", "featured": 1 if hard else 0}
    text = (f"Add a new product with the New product form: SKU {sku}, name '{name}', category {cat}, price "
            f"{money(row['price_cents'])}, stock {row['stock']}, status {row['status']}")
    text += (f", description '{row['description']}', and mark it as featured." if hard else ", not featured, no description.")
    return {"question": text, "new_rows": [{"table": "products", "row": row}], "changes": []}


def _write_tests(rng: random.Random, shop: Shop, hard: bool) -> dict[str, Any]:
    lab_seed = rng.randrange(2**31)
    lab = make_lab_page(lab_seed, hard)
    text = ("Write automated tests for the page at /lab (no sign-in needed; look at it with the browser tools). "
            "Write one pytest file with write_file at tests/test_lab.py using Playwright's sync API: each test "
            "takes a `page` fixture (already provided: a playwright.sync_api.Page that has just opened /lab) and "
            "checks one behaviour. The page is specified to behave like this:\n"
            + "\n".join(f"- {b}" for b in lab.behaviours)
            + f"\nWrite at least {len(lab.behaviours)} tests (one per behaviour), all of which must pass on the page; "
            "you can run them with run_tests. Score: passing tests / max(number of tests, 5).")
    return {"lab_seed": lab_seed, "question": text, "lab_kind": lab.kind}


BUILDERS = {"discount": _discount, "bulk_stock": _bulk_stock, "wizard": _wizard, "write_tests": _write_tests}


def draft(index: int, rng: random.Random) -> Draft:
    shop_seed = rng.randrange(2**31)
    shop = generate_shop(shop_seed)
    kind = KINDS[index % len(KINDS)]
    hard = rng.random() < 0.5
    spec = BUILDERS[kind](rng, shop, hard)
    if spec is None:  # no category with two low-stock products: fall back to a discount rule
        kind, spec = "discount", _discount(rng, shop, hard)
    password = f"shop-{rng.randint(1000, 9999)}"
    spec = {"kind": kind, "shop_seed": shop_seed, "password": password, **spec}
    instruction = PREAMBLE.format(password=password) + spec["question"] + " When you are done, say so."
    return Draft(instruction=instruction, difficulty="hard" if hard else "easy", payload=spec)


def lab_page_of(payload: dict[str, Any], difficulty: str) -> LabPage | None:
    """A test-writing instance's lab page (None for the other kinds)."""
    return make_lab_page(payload["lab_seed"], difficulty == "hard") if "lab_seed" in payload else None
