"""A corpus of realistic replies per API role, replayed by the paid-API test double (tests/paid_api_double.py).

Each case is a script: the replies a role gets on its successive calls, and what the role must make of them:
`parsed` (an answer it can use) or `clear` (no answer, with a reason that contains `why`). The replies are the
shapes hosted models really send: markdown fences, prose around the JSON, think blocks (closed, or cut before
the answer), refusals, replies cut at the token limit, the wrong schema, extra keys, empty content, a tool call
where text was expected and text where a tool call was expected, provider errors.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Reply:
    content: str | None = None
    calls: list[tuple[str, str]] = field(default_factory=list)  # (function name, raw arguments text)
    finish: str = "stop"
    status: int = 200  # a provider error (4xx) instead of a reply


@dataclass
class Case:
    name: str
    replies: list[Reply]
    expect: str  # "parsed" | "clear"
    why: str = ""  # for "clear": a phrase the recorded reason contains


def completion(reply: Reply, model: str) -> tuple[int, dict[str, Any]]:
    """The double's answer for one reply: an OpenAI chat.completion (with usage, so cost is counted)."""
    if reply.status != 200:
        return reply.status, {"error": {"message": "invalid request: the model could not process the input",
                                        "type": "invalid_request_error", "code": reply.status}}
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.calls:
        message["tool_calls"] = [{"id": f"call_{i}", "type": "function", "function": {"name": n, "arguments": a}}
                                 for i, (n, a) in enumerate(reply.calls)]
    finish = "tool_calls" if reply.calls and reply.finish == "stop" else reply.finish
    return 200, {"id": "chatcmpl-double", "object": "chat.completion", "created": 0, "model": model,
                 "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                 "usage": {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200}}


def replay(script: list[Reply]):
    """A Behaviour answering call i with script[i] (the last reply again past the end)."""
    seen = {"n": 0}

    def behaviour(body: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, Any]]:
        i = min(seen["n"], len(script) - 1)
        seen["n"] += 1
        return completion(script[i], body.get("model", "double"))

    return behaviour


RANK = json.dumps({"ranking": [1, 0], "rationale": "Candidate 1 re-reads the file the checks need."})
THINK = "<think>Candidate 0 repeats the mistake {wrong file}; candidate 1 is {better}.</think>\n"
JUDGE = [
    Case("plain JSON", [Reply(RANK)], "parsed"),
    Case("markdown fence", [Reply(f"```json\n{RANK}\n```")], "parsed"),
    Case("prose around JSON", [Reply(f"Here is my ranking:\n{RANK}\nLet me know if you need more.")], "parsed"),
    Case("think block with braces", [Reply(THINK + RANK)], "parsed"),
    Case("extra keys", [Reply(json.dumps({**json.loads(RANK), "confidence": 0.8, "notes": "close call"}))], "parsed"),
    Case("tool call instead of text", [Reply(None, [("submit_ranking", RANK)])], "parsed"),
    Case("cut, then whole", [Reply(RANK[:25], finish="length"), Reply(RANK)], "parsed"),
    Case("wrong schema, then right", [Reply(json.dumps({"best": 1, "why": "it reads"})), Reply(RANK)], "parsed"),
    Case("provider error, then answer", [Reply(status=400), Reply(RANK)], "parsed"),
    Case("refusal", [Reply("I'm sorry, but I can't help with ranking these.")] * 2, "clear", "no JSON object"),
    Case("cut twice", [Reply(RANK[:25], finish="length")] * 2, "clear", "cut at max_tokens"),
    Case("think never closed", [Reply("<think>Let me weigh candidate 0 against", finish="length")] * 2, "clear",
         "cut at max_tokens"),
    Case("empty content", [Reply("")] * 2, "clear", "the reply is empty"),
    Case("ranking misses an index", [Reply(json.dumps({"ranking": [1], "rationale": "x"}))] * 2, "clear",
         "every index"),
    Case("provider error twice", [Reply(status=400)] * 2, "clear", "judge call failed"),
]

ANSWER = {"t_star": 1, "category": "tool_use", "rationale": "Turn 1 read the wrong file."}
LOCATOR = [
    Case("answer as a tool call", [Reply(None, [("answer", json.dumps(ANSWER))])], "parsed"),
    Case("investigate, then answer", [Reply(None, [("failed_checks", "{}")]),
                                      Reply(None, [("read_turn", '{"turn": 1}')]),
                                      Reply(None, [("answer", json.dumps(ANSWER))])], "parsed"),
    Case("text where a tool call was expected", [Reply("I conclude: " + json.dumps(ANSWER))], "parsed"),
    Case("call written in the text, after a think block",
         [Reply(THINK + "<tool_call>\n" + json.dumps({"name": "answer", "arguments": ANSWER}) + "\n</tool_call>")],
         "parsed"),
    Case("numbers quoted", [Reply(None, [("answer", json.dumps({**ANSWER, "t_star": "1"}))])], "parsed"),
    Case("extra keys", [Reply(None, [("answer", json.dumps({**ANSWER, "confidence": 0.7}))])], "parsed"),
    Case("cut arguments, then whole", [Reply(None, [("answer", json.dumps(ANSWER)[:20])], finish="length"),
                                       Reply(None, [("answer", json.dumps(ANSWER))])], "parsed"),
    Case("category outside the ontology, then right",
         [Reply(None, [("answer", json.dumps({**ANSWER, "category": "bad_luck"}))]),
          Reply(None, [("answer", json.dumps(ANSWER))])], "parsed"),
    Case("refusal", [Reply("I cannot determine which turn failed.")] * 4, "clear", "holds no tool call"),
    Case("empty content", [Reply("")] * 4, "clear", "the reply is empty"),
    Case("turn out of range", [Reply(None, [("answer", json.dumps({**ANSWER, "t_star": 99}))])] * 4, "clear",
         "the turn must be an integer"),
    Case("cut every time", [Reply(None, [("answer", json.dumps(ANSWER)[:20])], finish="length")] * 4, "clear",
         "cut at max_tokens"),
    Case("provider error twice", [Reply(status=400)] * 2, "clear", "model call failed"),
]

ATTRIBUTION = json.dumps({"category": "tool_use", "evidence_turns": [1], "rationale": "Wrong file read.",
                          "confidence": 0.7})
ATTRIBUTOR = [
    Case("plain JSON", [Reply(ATTRIBUTION)], "parsed"),
    Case("markdown fence", [Reply(f"```json\n{ATTRIBUTION}\n```")], "parsed"),
    Case("prose around JSON", [Reply(f"My attribution: {ATTRIBUTION} (high confidence)")], "parsed"),
    Case("think block with braces", [Reply(THINK + ATTRIBUTION)], "parsed"),
    Case("extra keys", [Reply(json.dumps({**json.loads(ATTRIBUTION), "severity": "high"}))], "parsed"),
    Case("tool call instead of text", [Reply(None, [("attribute", ATTRIBUTION)])], "parsed"),
    Case("cut, then whole", [Reply(ATTRIBUTION[:30], finish="length"), Reply(ATTRIBUTION)], "parsed"),
    Case("category outside the ontology, then right",
         [Reply(json.dumps({**json.loads(ATTRIBUTION), "category": "bad_luck"})), Reply(ATTRIBUTION)], "parsed"),
    Case("refusal", [Reply("I won't speculate about the failure.")] * 2, "clear", "no JSON object"),
    Case("empty content", [Reply("")] * 2, "clear", "no JSON object"),
    Case("provider error", [Reply(status=400)], "clear", "judge call failed"),
]
