"""The `mle_agent:MODEL` locator: a scripted model (tests/scripted_model.py, a stand-in for an external LLM
reached through the real ModelClient and LiteLLM) reads turns and failed checks, replays the real environment
to a prefix and inspects it, has an invalid answer refused, then answers. The failing rollout is a SIMULATED
flawed student's."""

from __future__ import annotations

import asyncio

import pytest
from correction_helpers import student_rollout
from scripted_model import Step, scripted

from agents.client import ModelClient
from correction.locators import make_locator
from harness import baseline


@pytest.fixture(scope="module")
def failing():
    t = asyncio.run(student_rollout("stock_alert", 40, 0))
    assert not t.passed and t.injected_faults[0].turn == 3
    return t.view()


def test_mle_agent_investigates_replays_and_answers(failing):
    sheet = failing.turns[3].tool_calls[0].arguments["title"]
    role, script = scripted([
        Step(calls=[("failed_checks", {})]),
        Step(calls=[("read_turn", {"turn": 3})]),
        Step(calls=[("replay", {"turn": 4, "tool": "read_sheet", "arguments": {"title": sheet}})]),
        Step(calls=[("answer", {"t_star": 99, "category": "planning", "rationale": "x"})]),
        Step(calls=[("answer", {"t_star": 3, "category": "instruction_following",
                                "rationale": "turn 3 created the sheet with a renamed column"})]),
    ], max_tokens=300)
    locator = make_locator(f"mle_agent:{role.model}", client=ModelClient(role))
    loc = asyncio.run(locator.locate(failing, baseline("stock_alert"), None))
    assert loc.t_star == 3 and loc.category == "instruction_following" and loc.locator.startswith("mle_agent:")
    tool_msgs = [m["content"] for m in script.seen[-1] if m.get("role") == "tool"]
    assert any(c in tool_msgs[0] for c in failing.verdict.failed_checks)
    assert "create_sheet" in tool_msgs[1]
    assert "Product Name" in tool_msgs[2]  # the replayed state shows the student's renamed column
    assert tool_msgs[3].startswith("Error: the turn must be")


def test_mle_agent_without_an_answer_names_no_turn(failing):
    role, _ = scripted([Step(text="I am not sure.")] * 3, max_tokens=100)
    locator = make_locator(f"mle_agent:{role.model}", client=ModelClient(role), max_steps=3)
    loc = asyncio.run(locator.locate(failing, baseline("stock_alert"), None))
    assert loc.t_star is None and "no valid answer in 3" in loc.rationale
    with pytest.raises(ValueError, match="mle_agent:MODEL"):
        make_locator("mle_agent")
