"""Seeded shop data: the content of one instance's SQLite database.

`generate_shop(seed)` is pure (a seeded `random.Random`, no clock), so the generator, the environment and
the verifier all rebuild exactly the same shop from the seed. Money is stored in integer cents so sums
are exact; pages show it as `12.50`.
"""

from __future__ import annotations

import random
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

CATEGORIES = ("Kitchen", "Garden", "Office", "Toys", "Books", "Outdoor")
ORDER_STATUSES = ("pending", "processing", "complete", "cancelled", "refunded")
REVIEW_STATUSES = ("pending", "approved", "rejected")
CUSTOMER_GROUPS = ("general", "wholesale", "vip")
YEARS = (2022, 2023, 2024)
# Statuses that count as a sale in reports (the bestseller report and the questions about it agree on this).
SOLD_STATUSES = ("pending", "processing", "complete")

_ADJ = ("Red", "Blue", "Green", "Compact", "Deluxe", "Classic", "Bamboo", "Steel", "Linen", "Amber", "Nordic",
        "Rustic", "Solar", "Velvet", "Copper", "Granite", "Maple", "Coral", "Ivory", "Cobalt")
_NOUN = {
    "Kitchen": ("Mug", "Kettle", "Skillet", "Cutting Board", "Teapot", "Colander"),
    "Garden": ("Trowel", "Planter", "Hose", "Watering Can", "Pruner", "Seed Tray"),
    "Office": ("Stapler", "Notebook", "Desk Lamp", "Pen Set", "Organizer", "Binder"),
    "Toys": ("Kite", "Puzzle", "Yo-Yo", "Robot", "Train Set", "Spinning Top"),
    "Books": ("Atlas", "Cookbook", "Field Guide", "Sketchbook", "Almanac", "Journal"),
    "Outdoor": ("Lantern", "Tent", "Hammock", "Compass", "Cooler", "Backpack"),
}
_FIRST = ("Ada", "Bruno", "Clara", "Dmitri", "Elena", "Farah", "Gustav", "Hana", "Ivan", "Jonas", "Keiko", "Liam",
          "Maya", "Nils", "Olga", "Pablo", "Quinn", "Rosa", "Sven", "Tariq", "Uma", "Viktor", "Wanda", "Xavier",
          "Yara", "Zoe")
_LAST = ("Abbott", "Becker", "Castillo", "Dubois", "Eriksen", "Fischer", "Garcia", "Hoffman", "Ivanova", "Jensen",
         "Kowalski", "Lindqvist", "Moreau", "Novak", "Okafor", "Petrov", "Quinlan", "Rossi", "Schmidt", "Tanaka")
_CITIES = ("Lisbon", "Oslo", "Porto", "Lyon", "Graz", "Turin", "Malmo", "Ghent", "Brno", "Cork")
_REVIEW_TITLES = {1: "Broke quickly", 2: "Disappointing", 3: "It is fine", 4: "Works well", 5: "Love it"}


@dataclass
class Shop:
    """All rows of one shop, as plain tuples in table column order."""

    products: list[dict] = field(default_factory=list)
    customers: list[dict] = field(default_factory=list)
    orders: list[dict] = field(default_factory=list)
    order_items: list[dict] = field(default_factory=list)
    reviews: list[dict] = field(default_factory=list)
    discount_rules: list[dict] = field(default_factory=list)

    def product(self, sku: str) -> dict:
        return next(p for p in self.products if p["sku"] == sku)

    def customer(self, customer_id: int) -> dict:
        return next(c for c in self.customers if c["id"] == customer_id)

    def units_sold(self, year: int) -> Counter[str]:
        """SKU -> units sold in `year` over orders whose status counts as a sale."""
        sold = {o["id"] for o in self.orders if o["date"].startswith(str(year)) and o["status"] in SOLD_STATUSES}
        units: Counter[str] = Counter()
        for it in self.order_items:
            if it["order_id"] in sold:
                units[it["sku"]] += it["qty"]
        return units


def generate_shop(seed: int) -> Shop:
    rng = random.Random(seed)
    shop = Shop()
    names: set[str] = set()
    n_products = rng.randint(42, 58)
    while len(shop.products) < n_products:
        cat = rng.choice(CATEGORIES)
        name = f"{rng.choice(_ADJ)} {rng.choice(_NOUN[cat])}"
        if name in names:
            continue
        names.add(name)
        i = len(shop.products) + 1
        shop.products.append({
            "sku": f"{cat[:3].upper()}-{100 + i * 7 + rng.randint(0, 6)}",
            "name": name, "category": cat,
            "price_cents": rng.randint(3, 180) * 50 + rng.choice((0, 49, 99)),
            "stock": rng.choice((0, 2, 3, 5, 8, 12, 15, 20, 25, 30, 40, 60, 80)) + rng.randint(0, 4),
            "status": "disabled" if rng.random() < 0.12 else "enabled",
            "description": "", "featured": 0,
        })
    people: set[str] = set()
    n_customers = rng.randint(26, 36)
    while len(shop.customers) < n_customers:
        first, last = rng.choice(_FIRST), rng.choice(_LAST)
        if f"{first} {last}" in people:
            continue
        people.add(f"{first} {last}")
        shop.customers.append({
            "id": len(shop.customers) + 1, "name": f"{first} {last}",
            "email": f"{first.lower()}.{last.lower()}@example.com", "city": rng.choice(_CITIES),
            "group": rng.choices(CUSTOMER_GROUPS, weights=(6, 2, 1))[0],
        })
    n_orders = rng.randint(170, 240)
    for oid in range(1, n_orders + 1):
        year = rng.choice(YEARS)
        date = f"{year}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        status = rng.choices(ORDER_STATUSES, weights=(2, 2, 10, 3, 1))[0]
        cust = rng.choice(shop.customers)["id"]
        total = 0
        for p in rng.sample(shop.products, rng.randint(1, 3)):
            qty = rng.randint(1, 5)
            shop.order_items.append({"order_id": oid, "sku": p["sku"], "qty": qty, "price_cents": p["price_cents"]})
            total += qty * p["price_cents"]
        shop.orders.append({"id": oid, "number": f"ORD-{10000 + oid}", "customer_id": cust, "date": date,
                            "status": status, "total_cents": total})
    shop.orders.sort(key=lambda o: (o["date"], o["id"]))
    n_reviews = rng.randint(70, 110)
    for rid in range(1, n_reviews + 1):
        rating = rng.choices((1, 2, 3, 4, 5), weights=(2, 2, 3, 5, 5))[0]
        shop.reviews.append({
            "id": rid, "sku": rng.choice(shop.products)["sku"], "customer_id": rng.choice(shop.customers)["id"],
            "rating": rating, "title": _REVIEW_TITLES[rating],
            "status": rng.choices(REVIEW_STATUSES, weights=(4, 5, 1))[0],
            "date": f"{rng.choice(YEARS)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
        })
    for i in range(rng.randint(2, 4)):
        shop.discount_rules.append({
            "id": i + 1, "name": f"Seasonal {i + 1}", "code": f"SEASON{i + 1}{rng.randint(10, 99)}",
            "percent": rng.choice((5, 10, 15, 20)), "min_subtotal_cents": rng.choice((0, 2000, 5000)),
            "category": rng.choice(("",) + CATEGORIES), "active": rng.randint(0, 1),
            "starts": f"2024-0{rng.randint(1, 4)}-01", "ends": f"2024-0{rng.randint(6, 9)}-30",
        })
    return shop


SCHEMA = """
CREATE TABLE products (sku TEXT PRIMARY KEY, name TEXT NOT NULL, category TEXT NOT NULL, price_cents INTEGER NOT NULL,
  stock INTEGER NOT NULL, status TEXT NOT NULL, description TEXT NOT NULL DEFAULT '', featured INTEGER NOT NULL DEFAULT 0);
CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT NOT NULL, city TEXT NOT NULL,
  "group" TEXT NOT NULL);
CREATE TABLE orders (id INTEGER PRIMARY KEY, number TEXT UNIQUE NOT NULL, customer_id INTEGER NOT NULL,
  date TEXT NOT NULL, status TEXT NOT NULL, total_cents INTEGER NOT NULL);
CREATE TABLE order_items (order_id INTEGER NOT NULL, sku TEXT NOT NULL, qty INTEGER NOT NULL, price_cents INTEGER NOT NULL);
CREATE TABLE reviews (id INTEGER PRIMARY KEY, sku TEXT NOT NULL, customer_id INTEGER NOT NULL, rating INTEGER NOT NULL,
  title TEXT NOT NULL, status TEXT NOT NULL, date TEXT NOT NULL);
CREATE TABLE discount_rules (id INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL, code TEXT UNIQUE NOT NULL,
  percent INTEGER NOT NULL, min_subtotal_cents INTEGER NOT NULL, category TEXT NOT NULL, active INTEGER NOT NULL,
  starts TEXT NOT NULL, ends TEXT NOT NULL);
"""
# Tables the agent can change through the app, with the key that identifies a row; the verifier diffs these.
MUTABLE_TABLES: dict[str, tuple[str, ...]] = {
    "products": ("sku",), "orders": ("number",), "reviews": ("id",), "discount_rules": ("code",),
}


def write_db(shop: Shop, path: Path | str) -> None:
    """Create the SQLite database for `shop` at `path` (":memory:" is not useful: callers want a file)."""
    con = sqlite3.connect(path)
    try:
        con.executescript(SCHEMA)
        for table, rows in (("products", shop.products), ("customers", shop.customers), ("orders", shop.orders),
                            ("order_items", shop.order_items), ("reviews", shop.reviews),
                            ("discount_rules", shop.discount_rules)):
            if rows:
                cols = list(rows[0])
                con.executemany(
                    f"INSERT INTO {table} ({', '.join(_q(c) for c in cols)}) VALUES ({', '.join('?' * len(cols))})",
                    [tuple(r[c] for c in cols) for r in rows],
                )
        con.commit()
    finally:
        con.close()


def dump_tables(con: sqlite3.Connection) -> dict[str, list[dict]]:
    """The mutable tables as sorted lists of dicts (ids of discount rules dropped: they depend on retries)."""
    out: dict[str, list[dict]] = {}
    con.row_factory = sqlite3.Row
    for table, key in MUTABLE_TABLES.items():
        rows = [dict(r) for r in con.execute(f"SELECT * FROM {table}")]
        if table == "discount_rules":
            for r in rows:
                r.pop("id", None)
        out[table] = sorted(rows, key=lambda r: tuple(str(r[k]) for k in key))
    return out


def money(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


def _q(col: str) -> str:
    return f'"{col}"'
