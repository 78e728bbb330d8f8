"""budget_approval faults: skipped or forgotten request threads, the approval conventions, reply and summary format.

Knowledge keys (harness/evolution/cards/budget_approval.yaml): equal_is_within_limit, ignore_superseded_catalog,
latest_amendment_counts, bulk_discount_round_down, summary_csv_format.
"""

from __future__ import annotations

import re
from typing import Any

from agents.flawed.menu import Action, Belief, FamilyMenu, NotApplicable, Slip, call_of, with_args
from agents.flawed.views import set_payload
from tasks.budget_approval.data import SUMMARY_PATH, BudgetPayload, Line
from tasks.records import ToolCall

_PRICE = re.compile(r"^(\S+) \| .* \| \$([0-9,]+)\.(\d\d)$", re.MULTILINE)
_LINE = re.compile(r"^- (\d+) x .*\((CUST-\d+|[A-Z]{3}-\d+)", re.MULTILINE)


def _requests(env: Any) -> list[str]:
    return [r.id for r in sorted(env.payload.requests, key=lambda r: r.id)]


def _read_unanswered(env: Any) -> list[str]:
    snap = env.snapshot()
    return [r.id for r in sorted(env.payload.requests, key=lambda r: r.id)
            if r.thread_id in env.threads_read and not any(m.sender == "you" for m in snap.threads[r.thread_id])]


def _drop_request(view: Any, unit: str) -> None:
    set_payload(view, requests=[r for r in view.payload.requests if r.id != unit])


def _equal_is_over(view: Any, unit: str) -> None:
    p: BudgetPayload = view.payload
    set_payload(view, limit_cents=p.limit_cents - 1, budgets={d: b - 1 for d, b in p.budgets.items()})


def _hard(env: Any) -> list[str]:
    return [""] if env.payload.hard else []


def _superseded_prices(view: Any, unit: str) -> None:
    p: BudgetPayload = view.payload
    stale = next(d for d in p.documents if "superseded" in d.title.lower())
    prices = {code: int(dollars.replace(",", "")) * 100 + int(cents) for code, dollars, cents in _PRICE.findall(stale.body)}
    set_payload(view, catalog=[c.model_copy(update={"price_cents": prices.get(c.code, c.price_cents)}) for c in p.catalog])


def _amended(env: Any) -> list[str]:
    return [""] if any(len(r.messages) > 1 for r in env.payload.requests) else []


def _original_requests(view: Any, unit: str) -> None:
    p: BudgetPayload = view.payload
    requests = []
    for r in p.requests:
        first = [Line(code=code, qty=int(qty)) for qty, code in _LINE.findall(r.messages[0].text)]
        requests.append(r.model_copy(update={"lines": first}) if len(r.messages) > 1 and first else r)
    set_payload(view, requests=requests)


def _no_bulk_discount(view: Any, unit: str) -> None:
    set_payload(view, hard=False)


def _summary_header(env: Any, action: Action) -> Action:
    call = call_of(action, "write_file")
    if call.arguments.get("path") != SUMMARY_PATH:
        raise NotApplicable("not the summary file")
    head, _, rest = call.arguments["content"].partition("\n")
    return with_args(call, content="request,manager,amount,decision\n" + rest)


def _summary_dollars(env: Any, action: Action) -> Action:
    call = call_of(action, "write_file")
    if call.arguments.get("path") != SUMMARY_PATH:
        raise NotApplicable("not the summary file")
    lines = call.arguments["content"].splitlines()
    rows = [lines[0]]
    for line in lines[1:]:
        rid, manager, total, decision = line.split(",")
        dollars, cents = total.split(".")
        rows.append(f'{rid},{manager},"${int(dollars):,}.{cents}",{decision}')
    return with_args(call, content="\n".join(rows) + "\n")


def _reply_without_total(env: Any, action: Action) -> Action:
    call = call_of(action, "reply_to_thread")
    text = re.sub(r"Total: \$[0-9,]+\.\d\d\. ", "", call.arguments["text"])
    if text == call.arguments["text"]:
        raise NotApplicable("no total in the reply")
    return with_args(call, text=text)


MENU = FamilyMenu(
    family="budget_approval",
    beliefs=(
        Belief("skip_thread", "planning", _requests, _drop_request,
               "never reads the thread of {unit}: no reply, no summary row, and the department's later requests are "
               "decided against a budget that never reserved it", cues=("thread", "request")),
        Belief("forget_thread", "long_context", _read_unanswered, _drop_request,
               "forgets request {unit} it read earlier: no reply, no summary row", cues=("thread", "request")),
        Belief("equal_is_over", "implicit_knowledge", lambda env: [""], _equal_is_over,
               "treats a total exactly equal to the remaining budget or the approval limit as over it",
               key="equal_is_within_limit", cues=("equal", "limit")),
        Belief("superseded_prices", "implicit_knowledge", _hard, _superseded_prices,
               "prices items from the superseded 2023 catalog", key="ignore_superseded_catalog",
               cues=("catalog", "superseded")),
        Belief("original_request", "implicit_knowledge", _amended, _original_requests,
               "uses each request as first sent, ignoring the requester's later amendment",
               key="latest_amendment_counts", cues=("amend", "change", "latest")),
        Belief("no_bulk_discount", "implicit_knowledge", _hard, _no_bulk_discount,
               "does not apply the 10% bulk discount to lines of 10 or more units", key="bulk_discount_round_down",
               cues=("discount", "bulk")),
    ),
    slips=(
        Slip("summary_header", "instruction_following", _summary_header, "wrote the summary with another header",
             key="summary_csv_format", cues=("header", "summary", "column")),
        Slip("summary_dollars", "instruction_following", _summary_dollars,
             "wrote summary totals as $-amounts with thousands separators", key="summary_csv_format",
             cues=("summary", "number", "total")),
        Slip("reply_without_total", "instruction_following", _reply_without_total,
             "replied without the 'Total: $...' part", cues=("total",)),
    ),
    adjacent={
        "reply_to_thread": lambda c: ToolCall(name="send_message", arguments={"to": c.arguments["thread_id"],
                                                                                "text": c.arguments["text"]}),
        "read_thread": lambda c: ToolCall(name="read_document", arguments={"doc_id": c.arguments["thread_id"]}),
        "read_document": lambda c: ToolCall(name="read_file", arguments={"path": c.arguments["doc_id"]}),
        "list_threads": lambda c: ToolCall(name="list_documents", arguments={}),
        "write_file": lambda c: ToolCall(name="read_file", arguments={"path": c.arguments["path"]}),
    },
    read_tools=frozenset({"search_contacts", "list_documents", "read_document", "list_threads", "read_thread",
                          "list_files", "read_file"}),
    write_tools=frozenset({"reply_to_thread", "send_message", "write_file"}),
    not_applicable={
        "implicit_knowledge": "superseded_prices, original_request and no_bulk_discount only on hard instances; "
                              "equal_is_over only where a total equals a limit or a remaining budget",
    },
)
