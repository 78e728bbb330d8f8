"""The judge attributor: structured answers validated, one retry, then unattributed; and the transcript trim rule.

The judge model is the scripted model (tests/scripted_model.py): a test double standing in for an external
model, reached through the real `ModelClient` and LiteLLM, so the request the judge sends is the real one.
"""

from __future__ import annotations

import asyncio
import json
import re

import pytest
from attribution_helpers import CASES, make_case
from scripted_model import Step, scripted

from agents.records import InjectedFault, Trajectory, TriggerRecord, TurnRecord
from analysis.attribution import make_attributor
from analysis.attribution.judge import JudgeAttributor, completion_for, judge_request, parse_answer
from analysis.attribution.transcript import TranscriptConfig, compress_transcript
from tasks.records import TaskInstance, ToolCall, ToolResult, Verdict


@pytest.fixture(scope="module")
def failing() -> Trajectory:
    case = next(c for c in CASES if c.name == "wrong_columns")
    return asyncio.run(make_case(case, "stock_alert", 41)).view()


def _judge(steps: list[Step]) -> tuple[JudgeAttributor, object]:
    role, script = scripted(steps, max_tokens=300)
    return JudgeAttributor(role.model, completion_for(role)), script


VALID = {"category": "instruction_following", "evidence_turns": [3], "rationale": "the sheet's columns differ",
         "confidence": 0.8}


def test_valid_answer(failing: Trajectory) -> None:
    judge, script = _judge([Step(text="```json\n" + json.dumps(VALID) + "\n```")])
    a = asyncio.run(judge.attribute(failing))
    assert (a.category, a.evidence_turns, a.confidence) == ("instruction_following", [3], 0.8)
    assert a.attributor == judge.name and judge.name.startswith("judge:scripted/")
    sent = script.seen[0]
    assert len(script.seen) == 1 and sent[0]["role"] == "system" and "implicit_knowledge" in sent[0]["content"]
    assert "sheet_columns: usually points to instruction_following" in sent[1]["content"]
    assert "[turn 0]" in sent[1]["content"] and "FAILED CHECKS:" in sent[1]["content"]


def test_invalid_then_valid(failing: Trajectory) -> None:
    bad = {**VALID, "category": "vibes"}
    judge, script = _judge([Step(text=json.dumps(bad)), Step(text=json.dumps(VALID))])
    a = asyncio.run(judge.attribute(failing))
    assert a.category == "instruction_following"
    assert len(script.seen) == 2
    retry = script.seen[1]
    assert retry[-2] == {"role": "assistant", "content": json.dumps(bad)}
    assert "Your answer is invalid" in retry[-1]["content"] and "category" in retry[-1]["content"]


def test_invalid_twice_is_unattributed(failing: Trajectory) -> None:
    out_of_range = {**VALID, "evidence_turns": [999]}
    judge, script = _judge([Step(text="I think it is planning."), Step(text=json.dumps(out_of_range))])
    a = asyncio.run(judge.attribute(failing))
    assert a.category == "unattributed" and a.confidence == 0.0
    assert "invalidly 2 times" in a.rationale and "evidence_turns [999] do not exist" in a.rationale
    assert len(script.seen) == 2


def test_judge_refuses_ground_truth_and_passing(failing: Trajectory) -> None:
    judge, script = _judge([Step(text=json.dumps(VALID))])
    with pytest.raises(ValueError, match="must not read"):
        asyncio.run(judge.attribute(failing.model_copy(update={"injected_faults": [
            InjectedFault(turn=0, category="planning", kind="x")]})))
    with pytest.raises(ValueError, match="passed"):
        asyncio.run(judge.attribute(failing.model_copy(update={"verdict": Verdict(score=1.0)})))
    assert script.seen == []  # nothing reached the model


def test_make_attributor_builds_a_judge() -> None:
    role, _ = scripted([])
    j = make_attributor(f"judge:{role.model}", completion=completion_for(role))
    assert isinstance(j, JudgeAttributor) and j.name == f"judge:{role.model}"


def test_parse_answer_messages() -> None:
    assert parse_answer("noise " + json.dumps(VALID) + " trailing", 5).category == "instruction_following"
    with pytest.raises(ValueError, match="no JSON object"):
        parse_answer("planning", 5)
    with pytest.raises(ValueError, match="confidence"):
        parse_answer(json.dumps({**VALID, "confidence": 3}), 5)
    # extra keys a real model adds (and a think block before the answer) are not errors
    assert parse_answer("<think>{maybe}</think>" + json.dumps({**VALID, "why": "x"}), 5).category == VALID["category"]


def _long(n: int) -> Trajectory:
    inst = TaskInstance(id="f/0", family="f", index=0, split="test", instruction="Do it.", difficulty="easy", seed=0)
    turns, messages = [], [{"role": "user", "content": "Do it."}]
    for i in range(n):
        call = ToolCall(id=f"c{i}", name="read_file", arguments={"path": f"f{i}.txt"})
        bad = i == 20
        turns.append(TurnRecord(index=i, assistant={"role": "assistant", "content": f"step {i}"}, tool_calls=[call],
                                tool_results=[ToolResult(content="Error: nope" if bad else "x" * 5000, is_error=bad)],
                                triggers=[TriggerRecord(component_id="hook:guard", turn=i, kind="hook")] if i == 25 else []))
        messages += [{"role": "assistant", "content": f"step {i}"}, {"role": "tool", "tool_call_id": f"c{i}", "content": "x"}]
    return Trajectory(instance=inst, harness_id="h", model_id="m", seed=0, messages=messages, turns=turns,
                      stop_reason="max_turns", verdict=Verdict(score=0.0, failed_checks=["done"], feedback="FAILED done: no"))


def test_transcript_trim_rule() -> None:
    t = _long(60)
    cfg = TranscriptConfig(head_turns=4, tail_turns=12, max_flagged=8, max_chars=8000)
    text = compress_transcript(t, cfg)
    shown = [int(x) for x in re.findall(r"\[turn (\d+)\]", text)]
    assert shown == [0, 1, 2, 3, 20, 25, *range(48, 60)]  # head, flagged middle turns (error, hook), tail
    assert "[turns 4-19 omitted: read_file x16]" in text and "[turns 26-47 omitted: read_file x22]" in text
    assert len(text) <= 8000 and "ERROR Error: nope" in text and "harness: hook:guard" in text
    short = compress_transcript(_long(5), cfg)
    assert "omitted" not in short and short.count("[turn ") == 5
    assert judge_request(_long(3))[1]["content"].endswith("Which category caused this failure?")


@pytest.mark.vllm
def test_judge_through_a_real_vllm_model(failing: Trajectory, vllm_server: str) -> None:
    """The tiny random model cannot write the JSON: two invalid answers -> unattributed, through the real path."""
    from analysis.attribution.judge import ATTEMPTS

    judge = make_attributor("judge:hosted_vllm/tiny", api_base=vllm_server, max_tokens=64,
                            transcript=TranscriptConfig(max_chars=3000))
    a = asyncio.run(judge.attribute(failing))
    assert a.attributor == "judge:hosted_vllm/tiny"
    assert a.category == "unattributed" and f"invalidly {ATTEMPTS} times" in a.rationale, a.rationale
