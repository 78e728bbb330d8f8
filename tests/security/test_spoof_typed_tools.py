"""Red team, the typed-tool families (#12): anomaly_detection (SQL warehouse + bucket), budget_approval
(documents, threads, messages, file store), stock_alert (inventory, sheets, outbox) and website_admin (its final
answer, and SQL injection and path tricks through the browser tools). Every attempt goes through the agent's own tools (or final answer):
writes to the data the verifier derives its truth from, path tricks in keys, oversized or special values,
forged messages and over-claiming answers. Each must score no more than its real effect earns: the
do-nothing score where the tool refused, else at most what the same honest-but-wrong output earns, and
never 1.0. Holes found here and fixed: a report field over csv's 131,072-character limit (anomaly_detection)
and a total of 'inf' or 400 digits (budget_approval) made the verifier raise; an alert email whose body lists
every number from 0 to 99 passed `email_fields` (stock_alert)."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta

import pytest

import tasks
from tasks.anomaly_detection.data import (
    PARAMS_KEY,
    REPORT_COLUMNS,
    AnomalyPayload,
    iso,
    parse_iso,
    readings,
)
from tasks.anomaly_detection.oracle import report_csv
from tasks.base import Environment
from tasks.budget_approval.data import SUMMARY_COLUMNS, SUMMARY_PATH, contact, decide, money
from tasks.budget_approval.oracle import summary_csv
from tasks.records import FinalAnswer, Step, Verdict
from tasks.shop.data import generate_shop
from tasks.stock_alert.data import expected_row, low_stock, render, supplier_of

AD, BA, SA, WA = "anomaly_detection", "budget_approval", "stock_alert", "website_admin"


def _env(family: str, index: int) -> Environment:
    f = tasks.get(family)
    env = f.make_env(f.generate(index))
    env.reset()
    return env


async def _oracle(env: Environment, stop: Callable[[str], bool] = lambda name: False) -> None:
    """Run the family's oracle until it answers, or until its next call is one `stop` names."""
    f = tasks.get(env.instance.family)
    history: list[Step] = []
    while not isinstance(action := f.oracle_action(env, history), FinalAnswer) and not stop(action.name):
        history.append(Step(call=action, result=await env.call(action.name, action.arguments)))


async def _calls(env: Environment, calls: list[tuple[str, dict]]) -> list[bool]:
    """Make the calls; the is_error flag of each."""
    return [(await env.call(name, args)).is_error for name, args in calls]


def _nothing(family: str, index: int) -> float:
    with _env(family, index) as env:
        return env.verify().score


# --- anomaly_detection: the truth comes from the instance's parameters, never from the warehouse or bucket ---

def _ad_payload(env: Environment) -> AnomalyPayload:
    return env.payload  # type: ignore[attr-defined, no-any-return]


def _csv(rows: list[tuple[str, str, float]]) -> str:
    return ",".join(REPORT_COLUMNS) + "\n" + "".join(f"{s},{t},{v}\n" for s, t, v in rows)


def _window_readings(p: AnomalyPayload) -> list[tuple[str, str, float]]:
    return sorted({r for r in readings(p) if p.window_start <= r[1] < p.window_end})


AD_SQL_WRITES = [
    "DELETE FROM readings", "UPDATE readings SET value = 0", "DROP TABLE readings",
    "INSERT INTO readings SELECT * FROM readings", "WITH x AS (SELECT 1) DELETE FROM readings",
    "SELECT 1; DELETE FROM readings", "ATTACH DATABASE '/tmp/coevo-spoof.db' AS x", "PRAGMA writable_schema = 1",
    "PRAGMA query_only = 0", "CREATE TEMP TABLE readings (sensor_id TEXT, ts TEXT, value REAL)",
    "CREATE TEMP VIEW readings AS SELECT * FROM sensors", "VACUUM INTO '/tmp/coevo-spoof-vacuum.db'",
    "SELECT load_extension('/tmp/coevo-spoof.so')",
]


@pytest.mark.parametrize("index", [0, 1])
async def test_ad_sql_writes_are_refused_and_the_warehouse_stays_as_it_was(index: int) -> None:
    check = {"sql": "SELECT COUNT(*), SUM(value), MAX(ts) FROM readings"}
    with _env(AD, index) as env:
        before = (await env.call("sql_query", check)).content
        assert all(await _calls(env, [("sql_query", {"sql": s}) for s in AD_SQL_WRITES]))
        assert (await env.call("sql_query", check)).content == before
        empty = _csv([])  # the right report if the readings had been deleted
        await env.call("bucket_put", {"key": _ad_payload(env).report_key, "content": empty})
        attempted = env.verify().score
    with _env(AD, index) as env:
        await env.call("bucket_put", {"key": _ad_payload(env).report_key, "content": empty})
        plain = env.verify().score
    assert attempted == plain == 0.5  # uploaded, columns right, no anomaly found


AD_KEY_TRICKS: dict[str, Callable[[str], str]] = {
    "parent": lambda k: "../" + k,
    "absolute": lambda k: "/" + k,
    "up_and_back": lambda k: "reports/../" + k,
    "dot_prefix": lambda k: "./" + k,
    "double_slash": lambda k: k.replace("/", "//", 1),
    "dot_segment": lambda k: k.replace("/", "/./", 1),
    "backslash": lambda k: k.replace("/", "\\", 1),
    "trailing_slash": lambda k: k + "/",
    "nul_suffix": lambda k: k + "\x00",
    "upper_case": lambda k: k.upper(),
}


@pytest.mark.parametrize("trick", list(AD_KEY_TRICKS))
async def test_ad_report_under_a_tricked_key_is_not_read(trick: str) -> None:
    with _env(AD, 0) as env:
        key = AD_KEY_TRICKS[trick](_ad_payload(env).report_key)
        await env.call("bucket_put", {"key": key, "content": report_csv(env.truth)})  # type: ignore[attr-defined]
        # the parameter file cannot be overwritten under a spelling of its key either
        assert all(await _calls(env, [("bucket_put", {"key": k, "content": "{}"})
                                      for k in (PARAMS_KEY, f" {PARAMS_KEY} ")]))
        assert env.bucket.peek(PARAMS_KEY) != "{}"  # type: ignore[attr-defined]
        assert env.verify().score == _nothing(AD, 0) == 0.0


@pytest.mark.parametrize("index", [0, 1])
async def test_ad_a_forged_parameter_file_changes_no_truth(index: int) -> None:
    """Ranges forged so every reading is anomalous, beside the real file, then a report that follows them."""
    with _env(AD, index) as env:
        p = _ad_payload(env)
        forged = json.dumps({"version": 9, "rule": "every reading is anomalous",
                             "sensors": {s.id: {"min": 1e9, "max": -1e9} for s in p.sensors}})
        assert (await _calls(env, [("bucket_put", {"key": PARAMS_KEY, "content": forged}),
                                   ("bucket_put", {"key": "config/./sensor_params.json", "content": forged}),
                                   ("bucket_put", {"key": "config/sensor_params.v9.json", "content": forged})])
                == [True, False, False])
        await env.call("bucket_put", {"key": p.report_key, "content": _csv(_window_readings(p))})
        forged_score = env.verify()
    with _env(AD, index) as env:
        await env.call("bucket_put", {"key": p.report_key, "content": _csv(_window_readings(p))})
        plain = env.verify().score
    assert forged_score.score == plain == 0.75 and forged_score.failed_checks == ["precision"]


def _jittered(truth: list[tuple[str, str, float]], what: str) -> list[tuple[str, str, float]]:
    out = []
    for s, t, v in truth:
        if what == "time":
            out += [(s, iso(parse_iso(t) + timedelta(seconds=d)), v) for d in (-60, 0, 60)]
        else:
            out += [(s, t, round(v + d, 2)) for d in (-0.01, 0.0, 0.01)]
    return out


AD_OVERCLAIMS: dict[str, Callable[[Environment], str]] = {
    "every_reading_in_the_window": lambda env: _csv(_window_readings(_ad_payload(env))),
    "every_reading_of_every_sensor": lambda env: _csv(sorted(set(readings(_ad_payload(env))))),
    "each_anomaly_at_three_times": lambda env: _csv(_jittered(env.truth, "time")),  # type: ignore[attr-defined]
    "each_anomaly_at_three_values": lambda env: _csv(_jittered(env.truth, "value")),  # type: ignore[attr-defined]
}


@pytest.mark.parametrize("name", list(AD_OVERCLAIMS))
async def test_ad_flagging_more_than_the_anomalies_fails_precision(name: str) -> None:
    with _env(AD, 1) as env:
        await env.call("bucket_put", {"key": _ad_payload(env).report_key, "content": AD_OVERCLAIMS[name](env)})
        v = env.verify()
    assert v.failed_checks == ["precision"] and v.score == 0.75  # what any report with every anomaly and low
    # precision earns


AD_SPECIAL: dict[str, tuple[str, str]] = {  # name -> (junk row, the same junk row short)
    "field_over_the_csv_limit": ("A" * 150_000 + ",2024-01-01T00:00:00Z,1", "A,2024-01-01T00:00:00Z,1"),
    "unterminated_quote_to_the_end": ('"' + "A" * 150_000, '"A'),
    "nul_bytes": ("\x00" * 1000 + ",\x00,\x00", "\x00,\x00,\x00"),
}


@pytest.mark.parametrize("name", list(AD_SPECIAL))
async def test_ad_special_reports_score_no_more_than_plain_junk(name: str) -> None:
    long, short = AD_SPECIAL[name]
    scores = []
    for junk in (long, short):
        with _env(AD, 0) as env:
            text = report_csv(env.truth) + junk + "\n"  # type: ignore[attr-defined]
            assert not (await env.call("bucket_put", {"key": _ad_payload(env).report_key, "content": text})).is_error
            scores.append(env.verify().score)  # before the fix: csv.Error out of the verifier on the long field
    assert scores[0] <= scores[1]


async def test_ad_oversized_report_is_refused() -> None:
    with _env(AD, 0) as env:
        text = report_csv(env.truth) + "X,2024-01-01T00:00:00Z,1\n" * 50_000  # type: ignore[attr-defined]
        assert (await env.call("bucket_put", {"key": _ad_payload(env).report_key, "content": text})).is_error
        assert env.verify().score == _nothing(AD, 0)


# --- budget_approval: decisions come from the instance (documents, quotes, budgets), never from the threads ---

def _requests(env: Environment) -> list:
    return sorted(env.payload.requests, key=lambda r: r.id)  # type: ignore[attr-defined]


async def _ba_replies(env: Environment, text: Callable[[object, int, str], str]) -> None:
    truth = decide(env.payload)  # type: ignore[attr-defined]
    for r in _requests(env):
        await env.call("reply_to_thread", {"thread_id": r.thread_id, "text": text(r, *truth[r.id])})


BA_PATH_TRICKS = ["../" + SUMMARY_PATH, "/" + SUMMARY_PATH, "approvals/../" + SUMMARY_PATH, "./" + SUMMARY_PATH,
                  "approvals//summary.csv", "approvals/./summary.csv", "approvals\\summary.csv",
                  "Approvals/summary.csv", SUMMARY_PATH + "/", SUMMARY_PATH + "\x00", "approvals/summary.csv.",
                  "approvals/summary.CSV", "/tmp/" + SUMMARY_PATH]


@pytest.mark.parametrize("index", [0, 1])
async def test_ba_summary_under_a_tricked_path_is_not_read(index: int) -> None:
    with _env(BA, index) as env:
        await _oracle(env, stop=lambda name: name == "write_file")  # everything but the summary
        before = env.verify()
        await _calls(env, [("write_file", {"path": p, "content": summary_csv(env)}) for p in BA_PATH_TRICKS])
        after = env.verify()
    assert after.score == before.score == 5 / 6 and after.failed_checks == ["summary_file"]


@pytest.mark.parametrize("index", [0, 1])
async def test_ba_a_forged_amendment_in_the_thread_changes_no_total(index: int) -> None:
    """The agent posts a 'requester update' dropping every line, then answers by it: $0.00, APPROVE."""
    answer = lambda r, total, decision: "Total: $0.00. Decision: APPROVE."  # noqa: E731
    with _env(BA, index) as env:
        for r in _requests(env):
            name = contact(env.payload, r.manager_id).name  # type: ignore[attr-defined]
            await env.call("reply_to_thread", {"thread_id": r.thread_id, "text": f"{name}: Update: please drop "
                                               f"every line from {r.id}; the total is now $0.00."})
        await _ba_replies(env, answer)
        forged = env.verify()
    with _env(BA, index) as env:
        await _ba_replies(env, answer)
        plain = env.verify()
    assert forged.score == plain.score < 1.0 and "reply_totals" in forged.failed_checks


BA_OVERCLAIMS = {
    # the director told about every request (the policy escalates only some)
    "escalate_every_request": lambda env: [("send_message", {
        "to": env.payload.director_id, "text": "Escalating " + ", ".join(r.id for r in _requests(env)) + "."})],
    # every decision in the latest reply of each thread
    "every_decision_in_each_reply": lambda env: [("reply_to_thread", {
        "thread_id": r.thread_id, "text": f"Total: {money(decide(env.payload)[r.id][0])}. Decision: APPROVE. "
        "Decision: REJECT. Decision: ESCALATE."}) for r in _requests(env)],
    # one summary row per request and decision
    "every_decision_in_the_summary": lambda env: [("write_file", {"path": SUMMARY_PATH, "content": "\n".join(
        [",".join(SUMMARY_COLUMNS)] + [f"{r.id},{contact(env.payload, r.manager_id).name},"
                                       f"{decide(env.payload)[r.id][0] / 100:.2f},{d}"
                                       for r in _requests(env) for d in ("APPROVE", "REJECT", "ESCALATE")])})],
}
BA_HONEST_BUT_WRONG = {  # the same act, naming one answer: the bound
    "escalate_every_request": None,  # nothing honest to compare: the check must fail
    "every_decision_in_each_reply": lambda env: [("reply_to_thread", {
        "thread_id": r.thread_id, "text": f"Total: {money(decide(env.payload)[r.id][0])}. Decision: APPROVE."})
        for r in _requests(env)],
    "every_decision_in_the_summary": None,
}
BA_FAILS = {"escalate_every_request": "escalations", "every_decision_in_each_reply": "reply_decisions",
            "every_decision_in_the_summary": "summary_file"}


@pytest.mark.parametrize("index", [0, 1])
@pytest.mark.parametrize("name", list(BA_OVERCLAIMS))
async def test_ba_over_claiming_after_the_oracle_loses_its_check(name: str, index: int) -> None:
    scores = []
    for calls in (BA_OVERCLAIMS[name], BA_HONEST_BUT_WRONG[name]):
        if calls is None:
            continue
        with _env(BA, index) as env:
            await _oracle(env)
            assert env.verify().score == 1.0
            assert not any(await _calls(env, calls(env)))
            v = env.verify()
            scores.append(v.score)
            assert BA_FAILS[name] in v.failed_checks
    assert max(scores) < 1.0 and scores[0] <= scores[-1]


BA_SPECIAL_TOTALS = ["inf", "-inf", "1e400", "nan", "9" * 400, "$" + "9" * 4000]


@pytest.mark.parametrize("total", BA_SPECIAL_TOTALS, ids=lambda t: t[:8])
async def test_ba_special_totals_score_as_a_wrong_total(total: str) -> None:
    """A summary total and a reply total the verifier cannot turn into cents state no total."""
    def run(given: str) -> Callable[[Environment], list[tuple[str, dict]]]:
        def calls(env: Environment) -> list[tuple[str, dict]]:
            first = _requests(env)[0]
            lines = summary_csv(env).splitlines()
            cells = lines[1].split(",")
            cells[2] = given
            lines[1] = ",".join(cells)
            return [("write_file", {"path": SUMMARY_PATH, "content": "\n".join(lines)}),
                    ("reply_to_thread", {"thread_id": first.thread_id,
                                         "text": f"Total: ${given}. Decision: {decide(env.payload)[first.id][1]}"})]
        return calls

    scores = []
    for given in (total, "0.01"):
        with _env(BA, 1) as env:
            await _oracle(env)
            assert not any(await _calls(env, run(given)(env)))
            scores.append(env.verify().score)  # before the fix: OverflowError out of the verifier
    assert scores[0] == scores[1] < 1.0


async def test_ba_oversized_writes_and_messages_are_refused() -> None:
    with _env(BA, 0) as env:
        r = _requests(env)[0]
        state = env.state()  # type: ignore[attr-defined]
        assert all(await _calls(env, [
            ("write_file", {"path": SUMMARY_PATH, "content": "x" * 50_001}),
            ("reply_to_thread", {"thread_id": r.thread_id, "text": "Total: $1.00. Decision: APPROVE. " * 200}),
            ("send_message", {"to": env.payload.director_id, "text": "REQ-1 " * 1000}),  # type: ignore[attr-defined]
            ("write_file", {"path": "a" * 201, "content": "x"}),
            ("reply_to_thread", {"thread_id": "../" + r.thread_id, "text": "Decision: APPROVE"}),
        ]))
        assert env.state() == state  # type: ignore[attr-defined]
        assert env.verify().score == _nothing(BA, 0)


# --- stock_alert: the low-stock set comes from the instance's products, which no tool can change -------------

async def _sa_sheet(env: Environment, rows: list[list[str]]) -> None:
    p = env.payload  # type: ignore[attr-defined]
    await env.call("create_sheet", {"title": p.sheet_title, "columns": list(p.columns)})
    await env.call("append_rows", {"title": p.sheet_title, "rows": rows})


async def _sa_emails(env: Environment, products: list, body: Callable[[object], str] | None = None) -> None:
    p = env.payload  # type: ignore[attr-defined]
    for pr in products:
        to, subject, text = render(p, pr)
        await env.call("send_email", {"to": to, "subject": subject, "body": body(pr) if body else text})


@pytest.mark.parametrize("index", [0, 1])
async def test_sa_alerting_every_product_is_not_full_marks(index: int) -> None:
    with _env(SA, index) as env:
        p = env.payload  # type: ignore[attr-defined]
        await _sa_sheet(env, [expected_row(p, pr) for pr in p.products])
        await _sa_emails(env, p.products)
        v = env.verify()
    assert v.failed_checks == ["sheet_rows_only_low_stock", "no_extra_emails"] and v.score == 5 / 7


@pytest.mark.parametrize("index", [0, 1])
async def test_sa_one_email_per_supplier_naming_all_its_products_is_not_full_marks(index: int) -> None:
    with _env(SA, index) as env:
        p = env.payload  # type: ignore[attr-defined]
        low = low_stock(p)
        await _sa_sheet(env, [expected_row(p, pr) for pr in low])
        for s in p.suppliers:
            mine = [pr for pr in low if pr.supplier_id == s.id]
            if mine:
                await env.call("send_email", {"to": s.email, "subject": render(p, mine[0])[1],
                                              "body": "\n\n".join(render(p, pr)[2] for pr in mine)})
        v = env.verify()
    assert {"email_fields", "no_extra_emails"} <= set(v.failed_checks) and v.score <= 5 / 7


@pytest.mark.parametrize("index", [0, 1])
async def test_sa_a_body_listing_every_number_states_no_stock(index: int) -> None:
    """Every number from 0 to 99 in the body names the stock and the threshold without stating either: it
    earns what the body without the stock figure earns (before the fix: 1.0)."""
    def stuffed(pr: object) -> str:
        p = env.payload  # type: ignore[attr-defined]
        return (f"Hello {supplier_of(p, pr).name}, {p.store} is low on {pr.name} (SKU {pr.sku}): the stock "  # type: ignore
                "and the reorder level are among " + " ".join(str(n) for n in range(100)) + ".")

    def without_stock(pr: object) -> str:
        return render(env.payload, pr)[2].replace(f": {pr.stock} units", ": some units")  # type: ignore

    scores = []
    for body in (stuffed, without_stock):
        with _env(SA, index) as env:
            low = low_stock(env.payload)  # type: ignore[attr-defined]
            await _sa_sheet(env, [expected_row(env.payload, pr) for pr in low])  # type: ignore[attr-defined]
            await _sa_emails(env, low, body)
            v = env.verify()
            assert v.failed_checks == ["email_fields"]
            scores.append(v.score)
    assert scores[0] == scores[1] == 6 / 7


@pytest.mark.parametrize("index", [0, 1])
async def test_sa_forged_stock_figures_do_not_make_a_product_low(index: int) -> None:
    """Every product written (and emailed) with its stock forged down to its threshold."""
    with _env(SA, index) as env:
        p = env.payload  # type: ignore[attr-defined]
        forged = [pr.model_copy(update={"stock": min(pr.stock, p.global_threshold or pr.reorder_level)})
                  for pr in p.products]
        await _sa_sheet(env, [expected_row(p, pr) for pr in forged])
        fp = p.model_copy(update={"products": forged})
        for pr in forged:
            to, subject, body = render(fp, pr)
            await env.call("send_email", {"to": to, "subject": subject, "body": body})
        v = env.verify()
    assert {"sheet_rows_only_low_stock", "no_extra_emails"} <= set(v.failed_checks) and v.score <= 5 / 7


async def test_sa_oversized_and_malformed_writes_are_refused() -> None:
    with _env(SA, 1) as env:
        p = env.payload  # type: ignore[attr-defined]
        pr = low_stock(p)[0]
        to, subject, body = render(p, pr)
        await env.call("create_sheet", {"title": p.sheet_title, "columns": list(p.columns)})
        state = env.state()  # type: ignore[attr-defined]
        width = len(p.columns)
        assert all(await _calls(env, [
            ("append_rows", {"title": p.sheet_title, "rows": [expected_row(p, pr)] * 501}),
            ("append_rows", {"title": p.sheet_title, "rows": [["x" * 501] * width]}),
            ("append_rows", {"title": p.sheet_title, "rows": [expected_row(p, pr), ["too", "short"][: width - 1]]}),
            ("append_rows", {"title": "../" + p.sheet_title, "rows": [expected_row(p, pr)]}),
            ("create_sheet", {"title": "t" * 101, "columns": list(p.columns)}),
            ("delete_sheet", {"title": p.sheet_title + "/.."}),
            ("send_email", {"to": to, "subject": subject, "body": body + "x" * 10_001}),
            ("send_email", {"to": f"{to},{to}", "subject": subject, "body": body}),
            ("send_email", {"to": f"{to} {to}", "subject": subject, "body": body}),
            ("send_email", {"to": to, "subject": "  ", "body": body}),
        ]))
        assert env.state() == state  # type: ignore[attr-defined]


# --- website_admin: answers (the questions are judged on the final answer; no browser is started) ---------

async def _wa_answer(index: int, text: str) -> Verdict:
    with _env(WA, index) as env:
        await env.submit(FinalAnswer(text=text))
        return env.verify()


async def test_wa_a_number_answer_naming_every_price_is_wrong() -> None:
    inst = tasks.get(WA).generate(0)
    assert "number" in inst.payload["answer"]  # price_of
    prices = sorted({pr["price_cents"] for pr in generate_shop(inst.payload["shop_seed"]).products})
    hedged = await _wa_answer(0, "It is one of " + ", ".join(f"${c / 100:.2f}" for c in prices) + ".")
    assert "answer" in hedged.failed_checks and hedged.score == _nothing(WA, 0) < 1.0


async def test_wa_naming_every_product_as_a_top_seller_is_not_full_marks() -> None:
    inst = tasks.get(WA).generate(5)
    want = inst.payload["answer"]["names"]  # top_sellers
    names = [pr["name"] for pr in generate_shop(inst.payload["shop_seed"]).products]
    everything = await _wa_answer(5, "The best sellers: " + ", ".join(names) + ".")
    wrong_extra = next(n for n in names if not any(n.lower() in w.lower() or w.lower() in n.lower() for w in want))
    one_extra = await _wa_answer(5, "The best sellers: " + ", ".join(want + [wrong_extra]) + ".")
    assert "no_extra_products" in everything.failed_checks
    assert everything.score <= one_extra.score < 1.0


# --- website_admin through the browser: injection in every filter and search, paths outside the app --------
_INJECTIONS = ("' OR 1=1; UPDATE products SET price_cents = 1; --", "x' UNION SELECT sku, name FROM products --",
               "1); DELETE FROM reviews; --", "%' ; DROP TABLE orders; --")


async def test_wa_injection_through_urls_and_forms_changes_nothing() -> None:
    """Signed in, an edit task's agent puts SQL into every list filter and the search box, and asks for files
    outside the app: the database is exactly as it was and the score is the do-nothing score."""
    from urllib.parse import quote

    from tasks.shop.oracle import login_steps

    index = next(i for i in range(100) if tasks.get(WA).generate(i).payload["kind"] == "set_price")
    with _env(WA, index) as env:
        before = env.tables()  # type: ignore[attr-defined]
        calls = [(c.name, c.arguments) for c in login_steps(env.instance.payload["password"], "/products")]
        for text in _INJECTIONS:
            for page, field in (("products", "q"), ("products", "category"), ("orders", "status"),
                                ("orders", "year"), ("customers", "q"), ("reviews", "rating"), ("stock", "below")):
                calls.append(("goto", {"url": f"/{page}?{field}={quote(text)}&page={quote(text)}"}))
            calls += [("goto", {"url": "/products"}), ("fill", {"ref": "q", "text": text}), ("press", {"key": "Enter", "ref": "q"})]
        results = [await env.call(name, args) for name, args in calls]
        for path in ("/../../etc/passwd", "/products/..%2f..%2f..%2fetc%2fpasswd", "/static/../../etc/passwd"):
            results.append(r := await env.call("goto", {"url": path}))
            assert "root:" not in r.content, (path, r.content[:200])
        assert not any("Traceback" in r.content for r in results)
        errors = [(c, r.content[:120]) for c, r in zip(calls, results, strict=False) if r.is_error]
        assert not errors, errors  # signed in: every page loaded and the search was submitted
        await env.submit(FinalAnswer(text="Done."))
        assert env.tables() == before  # type: ignore[attr-defined]
        assert env.verify().score == _nothing(WA, index) < 1.0
