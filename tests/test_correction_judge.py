"""The `judge:MODEL` selector: a scripted model (tests/scripted_model.py, a stand-in for an external LLM reached
through the real ModelClient and LiteLLM) ranks candidates; invalid answers are sent back once, then nothing
is chosen. The failing rollout is a SIMULATED flawed student's (real environment and runtime)."""

from __future__ import annotations

import asyncio
import json

import pytest
from correction_helpers import student_rollout
from scripted_model import Step, scripted

from analysis.attribution.judge import completion_for
from correction.records import Candidate
from correction.selectors import make_selector
from harness import baseline


@pytest.fixture(scope="module")
def failing():
    t = asyncio.run(student_rollout("payroll_audit", 40, 0))
    assert not t.passed
    return t.view()


def cands(t) -> list[Candidate]:
    last = len(t.turns) - 1
    fix = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": json.dumps({"path": "x.csv"})}}]}
    return [Candidate(message=t.turns[last].assistant, rationale="The student's own finish.", seed=0),
            Candidate(message=fix, rationale="Re-read the attendance file first.", seed=1)]


def judge(steps):
    role, script = scripted(steps, max_tokens=300)
    return make_selector(f"judge:{role.model}", completion=completion_for(role)), script


def test_judge_ranks_after_one_retry_and_names_the_candidates(failing):
    sel, script = judge([Step(text=json.dumps({"ranking": [0, 0], "rationale": "x"})),
                         Step(text="```json\n" + json.dumps({"ranking": [1, 0], "rationale": "1 fixes it"}) + "\n```")])
    out = asyncio.run(sel.select(failing, baseline("payroll_audit"), len(failing.turns) - 1, cands(failing), None))
    assert out.chosen == 1 and [c.judge_rank for c in out.candidates] == [2, 1] and out.rationale == "1 fixes it"
    first = script.seen[0][-1]["content"]
    assert "Re-read the attendance file first." in first and "read_file" in first
    assert all(c in first for c in failing.verdict.failed_checks)
    assert "every index 0..1" in script.seen[1][-1]["content"]


def test_judge_chooses_nothing_after_two_invalid_answers(failing):
    sel, _ = judge([Step(text="the second one"), Step(text=json.dumps({"ranking": [2], "rationale": "?"}))])
    out = asyncio.run(sel.select(failing, baseline("payroll_audit"), len(failing.turns) - 1, cands(failing), None))
    assert out.chosen is None and "invalid judge answer twice" in out.rationale
    assert all(c.judge_rank is None for c in out.candidates)
    with pytest.raises(ValueError, match="judge:MODEL"):
        make_selector("judge")
