"""stock_alert data: the payload schema, the seeded generator and the ground truth.

easy: one global threshold stated in the prompt, ~12-18 products on one page.
hard: per-product reorder levels, discontinued products to skip, 35-55 products over several pages and a
      sheet that also carries the reorder level and the supplier name.
A product is low on stock when `stock <= threshold` (at or below). The generator always plants products
exactly at and one above the threshold so an off-by-one reading of the rule fails.
"""

from __future__ import annotations

import random

from pydantic import BaseModel, ConfigDict

from tasks.base import Draft

PAGE_SIZE = 15
STORE_NAMES = ["Northwind Outfitters", "Bluebird Home", "Copperleaf Supply", "Harbor & Pine", "Maple Street Goods"]
CATEGORIES = {
    "kitchen": ["Chef Knife", "Cutting Board", "Saucepan", "Kettle", "Whisk", "Spatula", "Colander", "Tea Towel"],
    "garden": ["Hand Trowel", "Pruning Shears", "Watering Can", "Garden Gloves", "Plant Pot", "Hose Nozzle"],
    "office": ["Stapler", "Desk Lamp", "Notebook A5", "Gel Pens", "Paper Tray", "Monitor Stand", "Label Maker"],
    "outdoor": ["Camping Lantern", "Water Bottle", "Day Pack", "Trail Mug", "Picnic Blanket", "Headlamp"],
    "bath": ["Bath Towel", "Soap Dish", "Shower Caddy", "Bath Mat", "Toothbrush Holder"],
}
VARIANTS = ["", "Pro", "Mini", "XL", "Classic", "Eco", "Deluxe"]
SUPPLIER_NAMES = ["Acme Wholesale", "Brightline Trading", "Crescent Imports", "Delta Goods Co", "Evergreen Supply",
                  "Fulton Distributors"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Supplier(_Model):
    id: str
    name: str
    email: str


class Product(_Model):
    sku: str
    name: str
    category: str
    stock: int
    reorder_level: int
    supplier_id: str
    discontinued: bool


class Template(_Model):
    subject: str
    body: str


class StockPayload(_Model):
    store: str
    global_threshold: int | None  # easy: one threshold for all; hard: None (per-product reorder levels)
    skip_discontinued: bool
    products: list[Product]
    suppliers: list[Supplier]
    template: Template
    sheet_title: str
    columns: list[str]


def threshold_of(p: StockPayload, product: Product) -> int:
    return p.global_threshold if p.global_threshold is not None else product.reorder_level


def low_stock(p: StockPayload) -> list[Product]:
    """Ground truth: the products that belong in the sheet and get an email, in catalogue order."""
    return [
        pr for pr in p.products
        if pr.stock <= threshold_of(p, pr) and not (p.skip_discontinued and pr.discontinued)
    ]


def supplier_of(p: StockPayload, product: Product) -> Supplier:
    return next(s for s in p.suppliers if s.id == product.supplier_id)


def fields_of(p: StockPayload, product: Product) -> dict[str, str]:
    """Template placeholder values for one product (also the sheet's row values)."""
    s = supplier_of(p, product)
    return {
        "sku": product.sku, "name": product.name, "stock": str(product.stock),
        "threshold": str(threshold_of(p, product)), "supplier_name": s.name, "store": p.store,
    }


def expected_row(p: StockPayload, product: Product) -> list[str]:
    f = fields_of(p, product)
    by_column = {"SKU": f["sku"], "Product": f["name"], "Stock": f["stock"], "Reorder Level": f["threshold"],
                 "Supplier": f["supplier_name"]}
    return [by_column[c] for c in p.columns]


def render(p: StockPayload, product: Product) -> tuple[str, str, str]:
    """(to, subject, body) of the alert email for one product."""
    f = fields_of(p, product)
    return supplier_of(p, product).email, p.template.subject.format(**f), p.template.body.format(**f)


SUBJECT = "Low stock alert: {name} ({sku})"
BODY = (
    "Hello {supplier_name},\n\n{store} is running low on {name} (SKU {sku}): {stock} units left, "
    "reorder level {threshold}. Please send us a restock quote.\n\nThank you,\n{store} purchasing"
)


def generate_payload(rng: random.Random, hard: bool) -> StockPayload:
    store = rng.choice(STORE_NAMES)
    n_suppliers = 4 if hard else 3
    suppliers = [
        Supplier(id=f"SUP-{i + 1:02d}", name=name, email=f"orders@{name.lower().replace(' ', '')[:12]}.example")
        for i, name in enumerate(rng.sample(SUPPLIER_NAMES, n_suppliers))
    ]
    n = rng.randint(35, 55) if hard else rng.randint(12, 18)
    global_threshold = None if hard else rng.randint(5, 15)
    names: set[str] = set()
    products: list[Product] = []
    sku_numbers = rng.sample(range(1000, 9999), n)
    for i in range(n):
        category = rng.choice(sorted(CATEGORIES))
        while True:
            name = f"{rng.choice(CATEGORIES[category])} {rng.choice(VARIANTS)}".strip()
            if name not in names:
                names.add(name)
                break
            name = f"{name} {rng.randint(2, 9)}"
            if name not in names:
                names.add(name)
                break
        level = rng.randint(4, 25)
        threshold = global_threshold if global_threshold is not None else level
        # Stock is planted around the threshold: well above, exactly at, one above, just below, zero.
        mode = rng.choices(["above", "at", "at+1", "below", "zero"], weights=[8, 1, 1, 2, 1])[0]
        stock = {"above": threshold + rng.randint(2, 60), "at": threshold, "at+1": threshold + 1,
                 "below": rng.randint(1, max(1, threshold - 1)), "zero": 0}[mode]
        products.append(Product(
            sku=f"{category[:3].upper()}-{sku_numbers[i]}", name=name, category=category, stock=stock,
            reorder_level=level, supplier_id=rng.choice(suppliers).id,
            discontinued=hard and rng.random() < 0.12,
        ))
    # Guarantee the boundary cases and at least two alerts, whatever the dice said.
    def force(idx: int, delta: int, discontinued: bool = False) -> None:
        pr = products[idx]
        t = global_threshold if global_threshold is not None else pr.reorder_level
        products[idx] = pr.model_copy(update={"stock": t + delta, "discontinued": discontinued})

    slots = rng.sample(range(n), 4)
    force(slots[0], 0)
    force(slots[1], 1)
    force(slots[2], -2)
    force(slots[3], -1, discontinued=hard)
    columns = ["SKU", "Product", "Stock", "Reorder Level", "Supplier"] if hard else ["SKU", "Product", "Stock"]
    return StockPayload(
        store=store, global_threshold=global_threshold, skip_discontinued=hard, products=products,
        suppliers=suppliers, template=Template(subject=SUBJECT, body=BODY),
        sheet_title=f"Low stock {rng.choice(['week', 'run', 'check'])} {rng.randint(10, 52)}", columns=columns,
    )


def instruction(p: StockPayload) -> str:
    rule = (
        f"A product is low on stock when its stock is at or below {p.global_threshold} units."
        if p.global_threshold is not None
        else "A product is low on stock when its stock is at or below its own reorder level (shown in the "
             "inventory listing). Ignore discontinued products."
    )
    cols = ", ".join(p.columns)
    explain = ("; 'Reorder Level' is the threshold that applied, 'Supplier' the supplier's name"
               if "Supplier" in p.columns else "")
    return (
        f"You handle purchasing for {p.store}. Check the shop inventory (all pages) for low-stock products. {rule}\n"
        f"1. Create a spreadsheet titled \"{p.sheet_title}\" with exactly the columns {cols} (in this order) and "
        f"write one row per low-stock product (all of them and nothing else{explain}).\n"
        "2. Send exactly one email per low-stock product to that product's supplier, using the alert email "
        "template (get it from the inventory service) with every placeholder filled in. Send no other emails.\n"
        "When you are done, reply with a one-line summary."
    )


def draft(index: int, rng: random.Random) -> Draft:
    """Even indices are easy, odd ones hard, so every split holds both levels."""
    hard = index % 2 == 1
    p = generate_payload(rng, hard)
    return Draft(instruction=instruction(p), difficulty="hard" if hard else "easy", payload=p.model_dump())
