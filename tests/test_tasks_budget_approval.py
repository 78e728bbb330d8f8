"""budget_approval: oracle 1.0 / do-nothing < 1.0 everywhere, wrong answers rejected, malformed calls harmless,
generation deterministic across processes, replay exact, keyword replies deterministic."""

from __future__ import annotations

import json

import pytest

import tasks
from tasks.budget_approval import BudgetApprovalEnv
from tasks.budget_approval.data import SUMMARY_PATH, decide, money
from tasks.budget_approval.oracle import summary_csv
from tasks.records import Step, ToolCall
from tasks_helpers import assert_replay_is_exact, instances_in_fresh_process, reset_env, solve

FAMILY = "budget_approval"


def _env(index: int) -> BudgetApprovalEnv:
    return reset_env(FAMILY, index, BudgetApprovalEnv)


def test_every_decision_kind_occurs() -> None:
    kinds = set()
    for inst in tasks.instances(FAMILY):
        env = tasks.make_env(inst)
        env.reset()
        kinds |= {d for _, d in decide(env.payload).values()}  # type: ignore[attr-defined]
    assert kinds == {"APPROVE", "REJECT", "ESCALATE"}


def test_generation_is_deterministic_across_processes() -> None:
    here = [i.model_dump(mode="json") for i in tasks.instances(FAMILY)]
    assert instances_in_fresh_process(FAMILY, list(range(len(here)))) == here


@pytest.mark.parametrize("index", [0, 1, 8, 9])
async def test_replay_reproduces_results_and_state(index: int) -> None:
    extra = [ToolCall(name="send_message", arguments={"to": "U99", "text": "hi"})]
    await assert_replay_is_exact(FAMILY, index, BudgetApprovalEnv, extra)


async def test_keyword_replies() -> None:
    env = _env(1)  # hard: has custom items
    p = env.payload
    code = sorted(p.custom_quotes)[0]
    r = await env.call("send_message", {"to": p.procurement_id, "text": f"Quote for {code.lower()} please"})
    assert money(p.custom_quotes[code]) in json.loads(r.content)["reply"]
    r = await env.call("send_message", {"to": p.procurement_id, "text": "hello"})
    assert "CUST-" in json.loads(r.content)["reply"]
    director_email = next(c.email for c in p.contacts if c.id == p.director_id)
    r = await env.call("send_message", {"to": director_email.upper(), "text": "About REQ-0001"})
    assert "REQ-0001" in json.loads(r.content)["reply"]


async def test_malformed_calls_are_errors_without_state_change() -> None:
    env = _env(1)
    for _ in range(5):
        action = tasks.get(FAMILY).oracle_action(env, [])
        assert isinstance(action, ToolCall)
        await env.call(action.name, action.arguments)
    before = env.state()
    thread = env.payload.requests[0].thread_id
    bad: list[tuple[str, object]] = [
        ("approve_all", {}),
        ("reply_to_thread", "{\"thread_id\": "),
        ("reply_to_thread", "\"just a string\""),
        ("reply_to_thread", {"thread_id": thread}),
        ("reply_to_thread", {"thread_id": thread, "text": "ok", "cc": "boss"}),
        ("reply_to_thread", {"thread_id": thread, "text": 42}),
        ("reply_to_thread", {"thread_id": thread, "text": "   "}),
        ("reply_to_thread", {"thread_id": "TH-00", "text": "Total: $1.00 Decision: APPROVE"}),
        ("reply_to_thread", {"thread_id": thread, "text": "x" * 250_000}),
        ("reply_to_thread", {"thread_id": thread, "text": "x" * 6_000}),
        ("send_message", {"to": "nobody@nowhere.example", "text": "hi"}),
        ("read_document", {"doc_id": "DOC-999"}),
        ("read_document", {"doc_id": ["DOC-1"]}),
        ("write_file", {"path": "../etc/passwd", "content": "x"}),
        ("write_file", {"path": "/abs/path.csv", "content": "x"}),
        ("write_file", {"path": SUMMARY_PATH, "content": "x" * 60_000}),
        ("read_file", {"path": SUMMARY_PATH}),
        ("search_contacts", {"query": "q" * 500}),
    ]
    for name, args in bad:
        result = await env.call(name, args)  # type: ignore[arg-type]
        assert result.is_error, (name, args, result.content)
        assert env.state() == before, (name, args)


async def test_oracle_recovers_from_a_student_state() -> None:
    env = _env(2)
    p = env.payload
    req = p.requests[0]
    await env.call("reply_to_thread", {"thread_id": req.thread_id, "text": "Total: $1.00. Decision: REJECT"})
    await env.call("write_file", {"path": SUMMARY_PATH, "content": "request_id,total\n"})
    await solve(env)
    assert env.verify().score == 1.0


def _escalating_index(hard: bool) -> int:
    for inst in tasks.instances(FAMILY):
        env = tasks.make_env(inst)
        env.reset()
        if (inst.difficulty == "hard") == hard and any(d == "ESCALATE" for _, d in decide(env.payload).values()):  # type: ignore[attr-defined]
            return inst.index
    raise AssertionError("no escalating instance")


@pytest.mark.parametrize("index", [0, 1, 2, 3, 4, 5, _escalating_index(False), _escalating_index(True)])
async def test_verifier_rejects_plausible_wrong_answers(index: int) -> None:
    async def solved() -> tuple[BudgetApprovalEnv, list[Step]]:
        e = _env(index)
        steps = await solve(e)
        assert e.verify().score == 1.0
        return e, steps

    env, steps = await solved()
    p = env.payload
    truth = decide(p)
    req = sorted(p.requests, key=lambda r: r.id)[-1]
    total, decision = truth[req.id]
    # 1. off-by-one-cent total
    await env.call("reply_to_thread", {"thread_id": req.thread_id,
                                       "text": f"Total: {money(total + 1)}. Decision: {decision}"})
    assert env.verify().failed_checks == ["reply_totals"]
    # 2. right total, wrong decision
    env, _ = await solved()
    other = "APPROVE" if decision != "APPROVE" else "REJECT"
    await env.call("reply_to_thread", {"thread_id": req.thread_id, "text": f"Total: {money(total)}. Decision: {other}"})
    assert env.verify().failed_checks == ["reply_decisions"]
    # 3. summary file missing a row
    env, _ = await solved()
    lines = summary_csv(env).splitlines()
    await env.call("write_file", {"path": SUMMARY_PATH, "content": "\n".join(lines[:-1])})
    assert env.verify().failed_checks == ["summary_file"]
    # 4. summary with a renamed column
    env, _ = await solved()
    await env.call("write_file", {"path": SUMMARY_PATH, "content": summary_csv(env).replace("total", "amount", 1)})
    assert env.verify().failed_checks == ["summary_file"]
    # 5. an escalation of a request that should not be escalated
    not_escalated = [rid for rid, (_, d) in truth.items() if d != "ESCALATE"]
    if not_escalated:
        env, _ = await solved()
        await env.call("send_message", {"to": p.director_id, "text": f"Escalating {not_escalated[0]}"})
        assert env.verify().failed_checks == ["escalations"]
    # 6. escalations never sent (the same work minus the messages to the director)
    if any(d == "ESCALATE" for _, d in truth.values()):
        fresh = _env(index)
        kept = [s.call for s in steps if not (s.call.name == "send_message"
                                              and s.call.arguments["to"] == p.director_id)]  # type: ignore[index]
        await fresh.replay(kept)
        assert {"escalations", "required_people_contacted"} <= set(fresh.verify().failed_checks)
    # 7. required documents skipped (same replies without reading the policy)
    fresh = _env(index)
    kept = [s.call for s in steps if s.call.name != "read_document"]
    await fresh.replay(kept)
    assert fresh.verify().failed_checks == ["required_documents_read"]
