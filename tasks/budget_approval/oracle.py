"""budget_approval reference policy: read the documents and threads, get custom quotes, reply, escalate,
write the summary. It decides from the environment's state alone, so it also finishes from a student's
state (a wrong escalation cannot be taken back; from there no policy can score 1.0)."""

from __future__ import annotations

from collections.abc import Sequence

from tasks.budget_approval.data import SUMMARY_COLUMNS, SUMMARY_PATH, contact, decide, money
from tasks.budget_approval.env import BudgetApprovalEnv
from tasks.budget_approval.verify import AGENT, escalated_ids, latest_reply, parse_reply, summary_problems
from tasks.records import FinalAnswer, Step, ToolCall


def summary_csv(env: BudgetApprovalEnv) -> str:
    p = env.payload
    truth = decide(p)
    rows = [",".join(SUMMARY_COLUMNS)]
    for req in sorted(p.requests, key=lambda r: r.id):
        total, decision = truth[req.id]
        rows.append(f"{req.id},{contact(p, req.manager_id).name},{total // 100}.{total % 100:02d},{decision}")
    return "\n".join(rows) + "\n"


def next_action(env: BudgetApprovalEnv, history: Sequence[Step]) -> ToolCall | FinalAnswer:
    p = env.payload
    if not env.listed_documents:
        return ToolCall(name="list_documents", arguments={})
    for d in p.documents:
        if d.required and d.id not in env.docs_read:
            return ToolCall(name="read_document", arguments={"doc_id": d.id})
    if not env.listed_threads:
        return ToolCall(name="list_threads", arguments={})
    for r in sorted(p.requests, key=lambda r: r.id):
        if r.thread_id not in env.threads_read:
            return ToolCall(name="read_thread", arguments={"thread_id": r.thread_id})

    snap = env.snapshot()
    custom = sorted({ln.code for r in p.requests for ln in r.lines if ln.code in p.custom_quotes})
    asked = " ".join(m.text.upper() for m in snap.dms.get(p.procurement_id, []) if m.sender == AGENT)
    if custom and any(c not in asked for c in custom):
        if "procurement" not in env.searches:
            return ToolCall(name="search_contacts", arguments={"query": "procurement"})
        return ToolCall(name="send_message", arguments={
            "to": p.procurement_id, "text": f"Hello, could you quote the unit price for {', '.join(custom)}?"})

    truth = decide(p)
    for r in sorted(p.requests, key=lambda r: r.id):
        total, decision = truth[r.id]
        reply = latest_reply(snap, r.thread_id)
        if reply is None or parse_reply(reply) != (total, decision):
            return ToolCall(name="reply_to_thread", arguments={
                "thread_id": r.thread_id,
                "text": f"Hi {contact(p, r.manager_id).name.split()[0]}, request {r.id}: Total: {money(total)}. "
                        f"Decision: {decision}.",
            })

    pending = [rid for rid, (_, d) in sorted(truth.items()) if d == "ESCALATE" and rid not in escalated_ids(p, snap)]
    if pending:
        if "finance director" not in env.searches:
            return ToolCall(name="search_contacts", arguments={"query": "Finance Director"})
        rid = pending[0]
        return ToolCall(name="send_message", arguments={
            "to": p.director_id,
            "text": f"Escalating {rid}: its total {money(truth[rid][0])} is within budget but above the "
                    f"{money(p.limit_cents)} approval limit.",
        })
    if summary_problems(p, snap):
        return ToolCall(name="write_file", arguments={"path": SUMMARY_PATH, "content": summary_csv(env)})
    counts = {d: sum(1 for _, x in truth.values() if x == d) for d in ("APPROVE", "ESCALATE", "REJECT")}
    return FinalAnswer(text=f"Decided {len(truth)} requests ({counts['APPROVE']} approved, {counts['ESCALATE']} "
                            f"escalated, {counts['REJECT']} rejected); summary in {SUMMARY_PATH}.")
