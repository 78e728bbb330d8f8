"""stock_alert reference policy: reads what a careful agent would read, then repairs the sheet and sends the
missing emails. It decides from the environment's state alone, so it also finishes from a student's state
(an email already sent to the wrong place cannot be recalled; from there no policy can score 1.0)."""

from __future__ import annotations

from collections.abc import Sequence

from tasks.records import FinalAnswer, Step, ToolCall
from tasks.stock_alert.data import expected_row, low_stock, render
from tasks.stock_alert.env import StockAlertEnv
from tasks.stock_alert.verify import email_ok, emails_about, find_sheet, row_key


def next_action(env: StockAlertEnv, history: Sequence[Step]) -> ToolCall | FinalAnswer:
    p = env.payload
    if not env.seen_template:
        return ToolCall(name="get_email_template", arguments={})
    for page in range(1, env.n_pages() + 1):
        if page not in env.pages_seen:
            return ToolCall(name="list_products", arguments={"page": page})
    if not env.seen_suppliers:
        return ToolCall(name="list_suppliers", arguments={})

    low = low_stock(p)
    snap = env.snapshot()
    found = find_sheet(p, snap)
    if found is None:
        return ToolCall(name="create_sheet", arguments={"title": p.sheet_title, "columns": list(p.columns)})
    title, sheet = found
    if [c.casefold() for c in sheet.columns] != [c.casefold() for c in p.columns]:
        return ToolCall(name="delete_sheet", arguments={"title": title})
    wanted = [expected_row(p, pr) for pr in low]
    wanted_keys = {row_key(r) for r in wanted}
    seen: set[tuple[str, ...]] = set()
    drop = []
    for i, row in enumerate(sheet.rows):
        k = row_key(row)
        if k not in wanted_keys or k in seen:
            drop.append(i + 1)
        seen.add(k)
    if drop:
        return ToolCall(name="delete_rows", arguments={"title": title, "row_numbers": drop})
    missing = [r for r in wanted if row_key(r) not in seen]
    if missing:
        return ToolCall(name="append_rows", arguments={"title": title, "rows": missing})

    about = emails_about(p, snap.outbox)
    for pr in low:
        if not any(email_ok(p, pr, snap.outbox[i]) for i in about[pr.sku]):
            to, subject, body = render(p, pr)
            return ToolCall(name="send_email", arguments={"to": to, "subject": subject, "body": body})
    return FinalAnswer(text=f"Wrote {len(low)} low-stock products to \"{p.sheet_title}\" and emailed their suppliers.")
