"""budget_approval verifier: named checks over the service's state (see docs/tasks_services.md).

It reads a `BudgetApprovalSnapshot` (documents read, thread and direct messages, the file store), copied
out of the environment, never the environment itself.
"""

from __future__ import annotations

import csv
import io
import re

from pydantic import BaseModel, ConfigDict

from tasks.budget_approval.data import (
    SUMMARY_COLUMNS,
    SUMMARY_PATH,
    BudgetPayload,
    Message,
    contact,
    decide,
    required_contacts,
)
from tasks.records import TaskInstance, Verdict

CHECK_NAMES = ("required_documents_read", "required_people_contacted", "reply_totals", "reply_decisions",
               "escalations", "summary_file")
AGENT = "you"  # the sender id of the agent's own messages


class BudgetApprovalSnapshot(BaseModel):
    """What the verifier reads: which documents were opened, every thread's and direct conversation's
    messages (oldest first; the agent's own have sender 'you') and the shared file store."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    docs_read: list[str]
    threads: dict[str, list[Message]]
    dms: dict[str, list[Message]]
    files: dict[str, str]

_TOTAL_RE = re.compile(r"total\W{0,3}\$?\s*([0-9][0-9,]*(?:\.[0-9]+)?)", re.IGNORECASE)
_DECISION_RE = re.compile(r"decision\W{0,3}(approve|reject|escalate)", re.IGNORECASE)
_REQ_RE = re.compile(r"\bREQ-\d+\b", re.IGNORECASE)


def parse_cents(text: str) -> int | None:
    try:
        return round(float(text.replace(",", "").replace("$", "").strip()) * 100)
    except (ValueError, OverflowError):  # not a number, or 'inf' / 400 digits: states no total
        return None


def parse_reply(text: str) -> tuple[int | None, str | None]:
    """(total cents, decision) stated in a reply; None where the reply does not state it."""
    t = _TOTAL_RE.search(text)
    d = _DECISION_RE.search(text)
    return (parse_cents(t.group(1)) if t else None), (d.group(1).upper() if d else None)


def latest_reply(snap: BudgetApprovalSnapshot, thread_id: str) -> str | None:
    mine = [m.text for m in snap.threads[thread_id] if m.sender == AGENT]
    return mine[-1] if mine else None


def escalated_ids(p: BudgetPayload, snap: BudgetApprovalSnapshot) -> set[str]:
    """Request ids named in the agent's messages to the Finance Director."""
    msgs = snap.dms.get(p.director_id, [])
    return {r.upper() for m in msgs if m.sender == AGENT for r in _REQ_RE.findall(m.text)}


def summary_problems(p: BudgetPayload, snap: BudgetApprovalSnapshot) -> list[str]:
    text = snap.files.get(SUMMARY_PATH)
    if text is None:
        return [f"{SUMMARY_PATH} does not exist"]
    rows = list(csv.reader(io.StringIO(text.strip())))
    if not rows or [c.strip().casefold() for c in rows[0]] != SUMMARY_COLUMNS:
        return [f"the header must be {','.join(SUMMARY_COLUMNS)}"]
    truth = decide(p)
    seen: dict[str, list[str]] = {}
    problems = []
    for row in rows[1:]:
        if not any(c.strip() for c in row):
            continue
        if len(row) != len(SUMMARY_COLUMNS):
            problems.append(f"row {row} does not have {len(SUMMARY_COLUMNS)} fields")
            continue
        rid = row[0].strip().upper()
        if rid in seen:
            problems.append(f"{rid} appears twice")
        seen[rid] = row
    for extra in sorted(set(seen) - set(truth)):
        problems.append(f"{extra} is not a request")
    for req in p.requests:
        row = seen.get(req.id)
        if row is None:
            problems.append(f"{req.id} is missing")
            continue
        total, decision = truth[req.id]
        if " ".join(row[1].split()).casefold() != contact(p, req.manager_id).name.casefold():
            problems.append(f"{req.id}: manager should be the requester's full name")
        if parse_cents(row[2]) != total:
            problems.append(f"{req.id}: total {row[2].strip()} is wrong")
        if row[3].strip().upper() != decision:
            problems.append(f"{req.id}: decision {row[3].strip()} is wrong")
    return problems


def verify(instance: TaskInstance, snap: BudgetApprovalSnapshot) -> Verdict:
    p = BudgetPayload.model_validate(instance.payload)
    truth = decide(p)
    checks: dict[str, bool] = {}
    why: dict[str, str] = {}

    required_docs = {d.id for d in p.documents if d.required}
    missing_docs = sorted(required_docs - set(snap.docs_read))
    checks["required_documents_read"] = not missing_docs
    why["required_documents_read"] = "not read: " + ", ".join(
        f"{d.id} ({d.title})" for d in p.documents if d.id in missing_docs)

    not_contacted = sorted(required_contacts(p) - set(snap.dms))
    checks["required_people_contacted"] = not not_contacted
    why["required_people_contacted"] = "policy requires messaging: " + ", ".join(
        contact(p, c).role for c in not_contacted)

    wrong_totals, wrong_decisions = [], []
    for req in p.requests:
        reply = latest_reply(snap, req.thread_id)
        total, decision = parse_reply(reply) if reply else (None, None)
        if total != truth[req.id][0]:
            wrong_totals.append(req.id if reply else f"{req.id} (no reply)")
        if decision != truth[req.id][1]:
            wrong_decisions.append(req.id if reply else f"{req.id} (no reply)")
    checks["reply_totals"] = not wrong_totals
    why["reply_totals"] = "wrong or missing 'Total: $...' in the latest reply for " + ", ".join(wrong_totals)
    checks["reply_decisions"] = not wrong_decisions
    why["reply_decisions"] = "wrong or missing 'Decision: ...' in the latest reply for " + ", ".join(wrong_decisions)

    should = {rid for rid, (_, d) in truth.items() if d == "ESCALATE"}
    did = escalated_ids(p, snap)
    checks["escalations"] = did == should
    why["escalations"] = (f"the Finance Director should be told about exactly {sorted(should) or 'no requests'}; "
                          f"was told about {sorted(did) or 'none'}")

    problems = summary_problems(p, snap)
    checks["summary_file"] = not problems
    why["summary_file"] = "; ".join(problems[:6])
    return Verdict.from_checks(checks, why)
