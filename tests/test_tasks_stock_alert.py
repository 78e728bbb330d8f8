"""stock_alert: oracle 1.0 / do-nothing < 1.0 everywhere, wrong answers rejected, malformed calls harmless,
generation deterministic across processes, replay exact."""

from __future__ import annotations

import json

import pytest

import tasks
from tasks.records import ToolCall
from tasks.stock_alert import StockAlertEnv
from tasks.stock_alert.env import MAX_ROWS_PER_SHEET
from tasks.tooling import MAX_LIST_ITEMS
from tasks.stock_alert.data import expected_row, low_stock, render, threshold_of
from tasks_helpers import assert_replay_is_exact, instances_in_fresh_process, reset_env, solve

FAMILY = "stock_alert"


def _env(index: int) -> StockAlertEnv:
    return reset_env(FAMILY, index, StockAlertEnv)


def test_generation_is_deterministic_across_processes() -> None:
    here = [i.model_dump(mode="json") for i in tasks.instances(FAMILY)]
    assert instances_in_fresh_process(FAMILY, list(range(len(here)))) == here


@pytest.mark.parametrize("index", [0, 1, 6, 7])
async def test_replay_reproduces_results_and_state(index: int) -> None:
    # an erroring call must replay identically too
    extra = [ToolCall(name="read_sheet", arguments={"title": "nope"})]
    await assert_replay_is_exact(FAMILY, index, StockAlertEnv, extra)


async def test_malformed_calls_are_errors_without_state_change() -> None:
    env = _env(1)
    steps = []
    for _ in range(6):  # a partly done state: template and products read, sheet created
        steps.append(await env.call(*_oracle_call(env)))
    await env.call("create_sheet", {"title": "scratch", "columns": ["a", "b"]})
    before = env.state()
    bad: list[tuple[str, object]] = [
        ("delete_everything", {}),
        ("append_rows", "{not json"),
        ("append_rows", "[1, 2]"),
        ("append_rows", {"title": "scratch"}),
        ("append_rows", {"title": "scratch", "rows": [["x", "y"]], "mode": "fast"}),
        ("append_rows", {"title": "scratch", "rows": "x,y"}),
        ("append_rows", {"title": "scratch", "rows": [["x", "y"], ["only one"]]}),  # validated before writing
        ("append_rows", {"title": "missing", "rows": [["x", "y"]]}),
        ("list_products", {"page": "two"}),
        ("list_products", {"page": 99}),
        ("create_sheet", {"title": "scratch", "columns": ["a"]}),
        ("create_sheet", {"title": "t2", "columns": ["a", "a"]}),
        ("delete_rows", {"title": "scratch", "row_numbers": [1]}),
        ("send_email", {"to": "a@b.example, c@d.example", "subject": "s", "body": "b"}),
        ("send_email", {"to": "nobody", "subject": "s", "body": "b"}),
        ("send_email", {"to": "a@b.example", "subject": "s", "body": "x" * 300_000}),
        ("send_email", {"to": "a@b.example", "subject": "s", "body": "x" * 50_000}),
        ("send_email", {"to": "a@b.example", "subject": ["s"], "body": "b"}),
    ]
    for name, args in bad:
        result = await env.call(name, args)  # type: ignore[arg-type]
        assert result.is_error, (name, args, result.content)
        assert result.content.startswith("Error:")
        assert env.state() == before, (name, args)
    env.close()


async def test_oversized_list_arguments_are_refused_before_any_work() -> None:
    """A 2M-row append_rows (as a dict or as JSON text), a row of too many cells, arguments too large in all
    or nested too deep: each is refused with the argument and its cap named, and nothing changes. The caps
    are checked before pydantic or the tool walks the payload (append_rows's own cap is the sheet's 500 rows)."""
    env = _env(0)
    await env.call("create_sheet", {"title": "t", "columns": ["a", "b"]})
    before = env.state()
    rows = [["x", 1]] * 2_000_000
    nested: list = []
    for _ in range(100):
        nested = [nested]
    cases: list[tuple[object, str]] = [
        ({"title": "t", "rows": rows}, f"argument 'rows' has 2000000 items; the limit is {MAX_ROWS_PER_SHEET}"),
        (json.dumps({"title": "t", "rows": rows[:200_000]}), "argument 'rows' has 200000 items"),
        (json.dumps({"title": "t", "rows": rows}), "characters of JSON; the limit is"),
        ({"title": "t", "rows": [["x"] * 5000]}, f"argument 'rows[0]' has 5000 items; the limit is {MAX_ROWS_PER_SHEET}"),
        ({"title": "t", "rows": [["y" * 150_000, "z" * 150_000]] * 2}, "larger than 400000 characters in all"),
        ({"title": "t", "rows": nested}, "nested more than 32 levels deep"),
    ]
    for args, expected in cases:
        result = await env.call("append_rows", args)  # type: ignore[arg-type]
        assert result.is_error and expected in result.content, result.content[:300]
        assert env.state() == before
    generic = await env.call("create_sheet", {"title": "u", "columns": [f"c{i}" for i in range(MAX_LIST_ITEMS + 1)]})
    assert generic.is_error and f"argument 'columns' has {MAX_LIST_ITEMS + 1} items; the limit is {MAX_LIST_ITEMS}" in generic.content
    env.close()


async def test_oracle_recovers_from_a_student_state() -> None:
    env = _env(3)
    p = env.payload
    await env.call("create_sheet", {"title": p.sheet_title, "columns": ["SKU", "Qty"]})  # wrong columns
    await env.call("list_products", {"page": 1})
    await solve(env)
    assert env.verify().score == 1.0
    env2 = _env(5)
    await env2.call("create_sheet", {"title": env2.payload.sheet_title, "columns": list(env2.payload.columns)})
    not_low = next(pr for pr in env2.payload.products if pr not in low_stock(env2.payload))
    row = expected_row(env2.payload, not_low)
    await env2.call("append_rows", {"title": env2.payload.sheet_title, "rows": [row, row]})
    await solve(env2)
    assert env2.verify().score == 1.0
    env.close()
    env2.close()


def _oracle_call(env: StockAlertEnv) -> tuple[str, dict]:
    action = tasks.get(FAMILY).oracle_action(env, [])
    assert isinstance(action, ToolCall)
    return action.name, action.arguments  # type: ignore[return-value]


@pytest.mark.parametrize("index", range(10))
async def test_verifier_rejects_plausible_wrong_answers(index: int) -> None:
    async def solved() -> StockAlertEnv:
        e = _env(index)
        await solve(e)
        assert e.verify().score == 1.0
        return e

    p = _env(index).payload
    low = low_stock(p)
    title = p.sheet_title
    at_plus_one = next(pr for pr in p.products if pr.stock == threshold_of(p, pr) + 1)
    at_threshold = next(pr for pr in low if pr.stock == threshold_of(p, pr))

    # 1. off-by-one rule (stock < threshold): the product exactly at the threshold is missing
    env = await solved()
    rows = [r for r in env.sheets[title]["rows"]]
    idx = rows.index(expected_row(p, at_threshold)) + 1
    await env.call("delete_rows", {"title": title, "row_numbers": [idx]})
    assert "sheet_rows_complete" in env.verify().failed_checks
    # 2. off-by-one the other way (stock <= threshold + 1): an extra row
    env = await solved()
    await env.call("append_rows", {"title": title, "rows": [expected_row(p, at_plus_one)]})
    assert "sheet_rows_only_low_stock" in env.verify().failed_checks
    # 3. an extra email about a product that is not low on stock
    env = await solved()
    to, subject, body = render(p, at_plus_one)
    await env.call("send_email", {"to": to, "subject": subject, "body": body})
    assert env.verify().failed_checks == ["no_extra_emails"]
    # 4. a second email for one product
    env = await solved()
    to, subject, body = render(p, low[0])
    await env.call("send_email", {"to": to, "subject": subject, "body": body})
    assert "one_email_per_low_product" in env.verify().failed_checks
    # 5. wrong column name
    env = _env(index)
    cols = ["SKU", "Product", "Qty"] + list(p.columns[3:])
    await env.call("create_sheet", {"title": title, "columns": cols})
    await env.call("append_rows", {"title": title, "rows": [expected_row(p, pr) for pr in low]})
    for pr in low:
        to, subject, body = render(p, pr)
        await env.call("send_email", {"to": to, "subject": subject, "body": body})
    v = env.verify()
    assert "sheet_columns" in v.failed_checks and v.score < 1.0
    # 6. an email with the stock figure left out of the body (template not filled in)
    env = _env(index)
    await env.call("create_sheet", {"title": title, "columns": list(p.columns)})
    await env.call("append_rows", {"title": title, "rows": [expected_row(p, pr) for pr in low]})
    for pr in low:
        to, subject, body = render(p, pr)
        await env.call("send_email", {"to": to, "subject": subject,
                                      "body": body.replace(f": {pr.stock} units", ": {stock} units")})
    assert env.verify().failed_checks == ["email_fields"]
