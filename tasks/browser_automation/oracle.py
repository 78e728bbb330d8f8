"""browser_automation reference policy: through the same browser tools as the agent, sign in (landing on the
workflow's page) and fill in the forms from the instance's gold row, or write the lab page's reference
tests. It plans from the database's current state: a rule or product that already exists is repaired on
its edit page."""

from __future__ import annotations

from collections.abc import Sequence

from tasks.browser_automation.env import BrowserAutomationEnv
from tasks.records import FinalAnswer, Step, ToolCall
from tasks.shop.data import money
from tasks.shop.lab_pages import make_lab_page
from tasks.shop.oracle import login_steps, plan_next


def next_action(env: BrowserAutomationEnv, history: Sequence[Step]) -> ToolCall | FinalAnswer:
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
