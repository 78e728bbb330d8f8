"""`browser_automation`: multi-step UI workflows on the shop-admin app, checked on the database after the
episode (create a discount rule, bulk-update stock for a filtered list, the three-page new-product
form), and a test-writing variant: write Playwright tests (pytest) for a generated page, scored by the
tests that pass against it: passed / max(total, 5).

Kinds cycle by index (25 each); difficulty is drawn per instance (more fields / more filters / one more
behaviour when hard).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from typing import Any

from tasks.base import Environment, Family, instance_seed
from tasks.lab_pages import make_lab_page
from tasks.pw_tests import TEST_FILE_RE, TestRun, run_tests
from tasks.records import FinalAnswer, Step, TaskInstance, ToolCall, Verdict
from tasks.shop_app.data import CATEGORIES, Shop, generate_shop, money
from tasks.shop_env import ShopEnvironment, login_steps, plan_next
from tasks.shop_tasks import diff_checks, initial_tables
from tasks.tooling import ToolError, tool

KINDS = ("discount", "bulk_stock", "wizard", "write_tests")
PREAMBLE = ("You operate the admin site of an online shop with the browser tools (start at /login; user "
            "'admin', password '{password}'). ")
MAX_TEST_FILES = 5
MAX_TEST_CHARS = 50_000
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


class BrowserAutomationEnv(ShopEnvironment):
    """Shop tools plus a tiny scoped workspace (only tests/test_*.py files) for the test-writing variant."""

    def __init__(self, instance: TaskInstance) -> None:
        super().__init__(instance)
        self.files: dict[str, str] = {}

    def _setup(self) -> None:
        super()._setup()
        self.files = {}

    def lab_html(self) -> str:
        p = self.instance.payload
        return make_lab_page(p["lab_seed"], self.instance.difficulty == "hard").html if "lab_seed" in p else ""

    @tool
    def write_file(self, path: str, content: str) -> str:
        """Write a test file into your workspace (replacing it if it exists).

        Args:
            path: 'tests/test_<name>.py' (lower-case letters, digits and underscores); nothing else can be written.
            content: The full Python source.
        """
        if not TEST_FILE_RE.match(path):
            raise ToolError(f"'{path[:80]}' is not allowed: write tests/test_<name>.py (lower-case, digits, underscores)")
        if len(content) > MAX_TEST_CHARS:
            raise ToolError(f"the file is {len(content)} characters; the limit is {MAX_TEST_CHARS}")
        name = path if path.startswith("tests/") else f"tests/{path}"
        if name not in self.files and len(self.files) >= MAX_TEST_FILES:
            raise ToolError(f"at most {MAX_TEST_FILES} test files; overwrite one of: {', '.join(sorted(self.files))}")
        self.files[name] = content
        return f"Wrote {name} ({len(content)} characters)."

    @tool
    def read_file(self, path: str) -> str:
        """Read back a test file you wrote.

        Args:
            path: The path given to write_file.
        """
        name = path if path.startswith("tests/") else f"tests/{path}"
        if name not in self.files:
            raise ToolError(f"no file '{path[:80]}'; files: {', '.join(sorted(self.files)) or '(none)'}")
        return self.files[name]

    @tool
    async def run_tests(self) -> str:
        """Run your test files with pytest against the /lab page and report which tests pass."""
        if "lab_seed" not in self.instance.payload:
            raise ToolError("this task has no page to test; run_tests is only for test-writing tasks")
        return (await self._run_tests()).summary()

    async def _run_tests(self) -> TestRun:
        if self.server is None:
            raise ToolError("the environment is not running")
        url = self.server.origin + "/lab"
        return await asyncio.to_thread(run_tests, dict(self.files), url)

    def verify(self) -> Verdict:
        p = self.instance.payload
        if "lab_seed" in p:
            return self._verify_tests()
        shop = self.shop()
        checks = diff_checks(initial_tables(shop), self.tables(), p["changes"], p["new_rows"])
        return Verdict.from_checks({k: ok for k, (ok, _) in checks.items()}, {k: why for k, (ok, why) in checks.items()})

    def _verify_tests(self) -> Verdict:
        if not self.files:
            return Verdict(score=0.0, failed_checks=["tests_written"], feedback="FAILED tests_written: no test file was written")
        if self.server is None:
            return Verdict(score=0.0, failed_checks=["tests_run"], feedback="FAILED tests_run: verify() needs the "
                           "environment running (call it before close())")
        run = run_tests(dict(self.files), self.server.origin + "/lab")
        passed = [f"test {i + 1} passed" for i in range(run.passed)]
        failed = [f"test {i + 1} not passed" for i in range(max(run.total, 5) - run.passed)]
        return Verdict(score=run.score, passed_checks=passed, failed_checks=failed, feedback=run.summary())


class BrowserAutomation(Family):
    name = "browser_automation"
    description = "Multi-step UI workflows on the shop-admin app (state-checked) and writing Playwright tests for a page."
    difficulties = ("easy", "hard")

    def generate(self, index: int) -> TaskInstance:
        rng = random.Random(instance_seed(self.name, index))
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
        return self.new_instance(index, instruction=instruction, difficulty="hard" if hard else "easy", payload=spec)

    def make_env(self, instance: TaskInstance) -> Environment:
        return BrowserAutomationEnv(instance)

    def oracle_action(self, env: Environment, history: Sequence[Step]) -> ToolCall | FinalAnswer:
        assert isinstance(env, BrowserAutomationEnv)
        p = env.instance.payload
        done = FinalAnswer(text="Done.")
        if p["kind"] == "write_tests":
            lab = make_lab_page(p["lab_seed"], env.instance.difficulty == "hard")
            source = "# Tests for the /lab page, one per specified behaviour.\n\n\n" + lab.oracle_tests
            if env.files.get("tests/test_lab.py") == source:
                return done
            return ToolCall(name="write_file", arguments={"path": "tests/test_lab.py", "content": source})
        if env.verify().passed:
            return done
        kind = p["kind"]
        if kind == "bulk_stock":
            f = p["filters"]
            page = "/stock?" + "&".join(f"{k}={v}" for k, v in f.items())
            body = [ToolCall(name="click", arguments={"ref": "select-all"}),
                    ToolCall(name="fill", arguments={"ref": "new-stock", "text": str(p["level"])}),
                    ToolCall(name="click", arguments={"ref": "apply-stock"})]
            return plan_next(login_steps(p["password"], page), body, body, history, done)
        row = p["new_rows"][0]["row"]
        if kind == "discount":
            existing = env.query("SELECT id, active FROM discount_rules WHERE code = ?", (row["code"],))
            page = f"/discounts/{existing[0]['id']}/edit" if existing else "/discounts/new"
            active_now = bool(existing and existing[0]["active"])
            body = [ToolCall(name="fill", arguments={"ref": "rule-name", "text": row["name"]}),
                    ToolCall(name="fill", arguments={"ref": "code", "text": row["code"]}),
                    ToolCall(name="fill", arguments={"ref": "percent", "text": str(row["percent"])})]
            if row["min_subtotal_cents"] or existing:
                body.append(ToolCall(name="fill", arguments={"ref": "min-subtotal", "text": money(row["min_subtotal_cents"])}))
            if row["category"] or existing:
                body.append(ToolCall(name="select", arguments={"ref": "rule-category", "option": row["category"] or "Any category"}))
            if bool(row["active"]) != active_now:
                body.append(ToolCall(name="click", arguments={"ref": "active"}))
            body += [ToolCall(name="fill", arguments={"ref": "starts", "text": row["starts"]}),
                     ToolCall(name="fill", arguments={"ref": "ends", "text": row["ends"]}),
                     ToolCall(name="click", arguments={"ref": "save-rule"})]
            return plan_next(login_steps(p["password"], page), body, body, history, done)
        # wizard: three pages; if a wrong version was already created, repair it on its edit page
        existing = env.query("SELECT featured FROM products WHERE sku = ?", (row["sku"],))
        price = money(row["price_cents"])
        tail = [ToolCall(name="fill", arguments={"ref": "price", "text": price}),
                ToolCall(name="fill", arguments={"ref": "stock", "text": str(row["stock"])}),
                ToolCall(name="select", arguments={"ref": "status", "option": row["status"]})]
        if row["description"] or existing:
            tail.append(ToolCall(name="fill", arguments={"ref": "description", "text": row["description"]}))
        featured_now = bool(existing and existing[0]["featured"])
        if bool(row["featured"]) != featured_now:
            tail.append(ToolCall(name="click", arguments={"ref": "featured"}))
        if existing:
            body = [ToolCall(name="fill", arguments={"ref": "name", "text": row["name"]}), *tail,
                    ToolCall(name="click", arguments={"ref": "save"})]
            return plan_next(login_steps(p["password"], f"/products/{row['sku']}"), body, body, history, done)
        body = [ToolCall(name="fill", arguments={"ref": "sku", "text": row["sku"]}),
                ToolCall(name="fill", arguments={"ref": "name", "text": row["name"]}),
                ToolCall(name="select", arguments={"ref": "category", "option": row["category"]}),
                ToolCall(name="click", arguments={"ref": "next"}), *tail,
                ToolCall(name="click", arguments={"ref": "next"}), ToolCall(name="click", arguments={"ref": "create"})]
        return plan_next(login_steps(p["password"], "/products/new"), body, body, history, done)
