"""website_admin reference policy: through the same browser tools as the agent, sign in (landing on the
page that shows the answer or holds the form), then read or edit. Edits are planned from the database's
current state, so changes already made drop out and a wrong one is redone."""

from __future__ import annotations

from collections.abc import Sequence

from tasks.records import FinalAnswer, Step, ToolCall
from tasks.shop.data import MUTABLE_TABLES
from tasks.shop.oracle import login_steps, plan_next
from tasks.website_admin.env import WebsiteAdminEnv


def next_action(env: WebsiteAdminEnv, history: Sequence[Step]) -> ToolCall | FinalAnswer:
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
