"""Any model family's OpenAI-format conversation -> the canonical messages the student's chat template renders.

Trajectories from an expert (another family, another tool-call format) and from the student all pass
through here before rendering, so every example reaches the template in one shape:

- system / user: `{"role", "content": str}`;
- assistant: `{"role", "content": str, "tool_calls": [{"id", "type": "function",
  "function": {"name", "arguments": dict}}]}` (tool calls are taken from `tool_calls`, the legacy
  `function_call`, or, when the server did not parse them, from the content in the hermes
  `<tool_call>{json}</tool_call>` or Qwen3-Coder `<function=NAME><parameter=P>V</parameter></function>` form);
- tool: `{"role": "tool", "tool_call_id", "content": str}`, every one answering a call of the assistant
  turn before it, and every call answered.

Anything that cannot be converted raises `ConversionError` with a short `reason` (the dataset counts
drops by reason) and a `detail` naming the message. Fields the student cannot render (e.g.
`reasoning_content`) are dropped on purpose: the student's template has no thinking channel.
"""

from __future__ import annotations

import json
import re
from typing import Any

# The reasons a conversation is dropped; the dataset manifest counts drops under these names.
REASON_ARGS_NOT_OBJECT = "tool_arguments_not_json_object"
REASON_CALL_WITHOUT_RESULT = "tool_call_without_result"
REASON_RESULT_WITHOUT_CALL = "tool_result_without_call"
REASON_BAD_MESSAGE = "malformed_message"
REASON_EMPTY_ASSISTANT = "empty_assistant_turn"
REASON_NO_ASSISTANT = "no_assistant_turn"

_HERMES_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_XML_FUNCTION = re.compile(r"<function=([^>\s]+)>(.*?)</function>", re.DOTALL)
_XML_PARAM = re.compile(r"<parameter=([^>\s]+)>\n?(.*?)\n?</parameter>", re.DOTALL)


class ConversionError(ValueError):
    """One conversation cannot be converted; `reason` is a stable counter key, `detail` says where."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def _text(content: Any, where: str) -> str:
    """OpenAI content is a string, None, or a list of parts; only text parts can be rendered."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                out.append(part["text"])
            else:
                raise ConversionError(REASON_BAD_MESSAGE, f"{where}: non-text content part {str(part)[:80]!r}")
        return "".join(out)
    raise ConversionError(REASON_BAD_MESSAGE, f"{where}: content of type {type(content).__name__}")


def _arguments(raw: Any, where: str) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}  # OpenAI sends "" for a call without arguments
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            return parsed
    raise ConversionError(REASON_ARGS_NOT_OBJECT, f"{where}: arguments {str(raw)[:80]!r} are not a JSON object")


def _xml_value(text: str) -> Any:
    """Qwen3-Coder writes parameter values bare; JSON-looking ones (numbers, lists) are decoded."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def _calls_in_content(content: str, where: str) -> tuple[str, list[dict[str, Any]]]:
    """Tool calls a server left unparsed in the text: (remaining text, [{name, arguments}])."""
    calls: list[dict[str, Any]] = []
    for i, m in enumerate(_HERMES_CALL.finditer(content)):
        body = m.group(1)
        fn = _XML_FUNCTION.search(body)
        if fn:  # Qwen3-Coder: <tool_call><function=NAME><parameter=P>V</parameter></function></tool_call>
            args = {p.group(1): _xml_value(p.group(2)) for p in _XML_PARAM.finditer(fn.group(2))}
            calls.append({"name": fn.group(1), "arguments": args})
            continue
        try:
            obj = json.loads(body)
        except json.JSONDecodeError:
            raise ConversionError(REASON_ARGS_NOT_OBJECT, f"{where}: tool call {i} in content is not JSON") from None
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            raise ConversionError(REASON_BAD_MESSAGE, f"{where}: tool call {i} in content has no name")
        calls.append({"name": obj["name"], "arguments": _arguments(obj.get("arguments"), f"{where} call {i}")})
    if not calls:
        return content, []
    return _HERMES_CALL.sub("", content).strip(), calls


def _assistant(msg: dict[str, Any], index: int, turn: int) -> dict[str, Any]:
    where = f"message {index} (assistant turn {turn})"
    content = _text(msg.get("content"), where)
    raw_calls = list(msg.get("tool_calls") or [])
    if msg.get("function_call"):  # legacy single-call field
        raw_calls.append({"id": "", "function": msg["function_call"]})
    calls: list[dict[str, Any]] = []
    for j, call in enumerate(raw_calls):
        fn = call.get("function", call) if isinstance(call, dict) else None
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise ConversionError(REASON_BAD_MESSAGE, f"{where}: tool call {j} has no function name")
        calls.append({"id": str(call.get("id") or ""), "name": fn["name"],
                      "arguments": _arguments(fn.get("arguments"), f"{where} call {j} ({fn['name']})")})
    if not calls and "<tool_call>" in content:
        content, found = _calls_in_content(content, where)
        calls = [{"id": "", **c} for c in found]
    if not content and not calls:
        raise ConversionError(REASON_EMPTY_ASSISTANT, f"{where}: no content and no tool calls")
    out: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        out["tool_calls"] = [
            {"id": c["id"] or f"call_{turn}_{j}", "type": "function",
             "function": {"name": c["name"], "arguments": c["arguments"]}}
            for j, c in enumerate(calls)
        ]
    return out


def to_student_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Canonical messages (see the module docstring); raises ConversionError for what cannot be trained on."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []  # ids of the last assistant turn's calls still waiting for their result
    turn = 0
    for i, msg in enumerate(messages):
        role = msg.get("role") if isinstance(msg, dict) else None
        if role != "tool" and pending:
            raise ConversionError(REASON_CALL_WITHOUT_RESULT,
                                  f"message {i} ({role}) follows tool call(s) {pending} that got no result")
        if role in ("system", "user"):
            out.append({"role": role, "content": _text(msg.get("content"), f"message {i} ({role})")})
        elif role == "assistant":
            conv = _assistant(msg, i, turn)
            pending = [c["id"] for c in conv.get("tool_calls", [])]
            out.append(conv)
            turn += 1
        elif role == "tool":
            if not pending:
                raise ConversionError(REASON_RESULT_WITHOUT_CALL, f"message {i}: tool result with no open tool call")
            call_id = str(msg.get("tool_call_id") or "")
            if call_id and call_id not in pending:
                raise ConversionError(REASON_RESULT_WITHOUT_CALL, f"message {i}: tool_call_id {call_id!r} matches no open call")
            # Without an id, results answer the calls in order (some providers omit ids).
            call_id = call_id or pending[0]
            pending.remove(call_id)
            out.append({"role": "tool", "tool_call_id": call_id, "content": _text(msg.get("content"), f"message {i} (tool)")})
        else:
            raise ConversionError(REASON_BAD_MESSAGE, f"message {i}: unknown role {role!r}")
    if pending:
        raise ConversionError(REASON_CALL_WITHOUT_RESULT, f"the conversation ends with tool call(s) {pending} unanswered")
    if turn == 0:
        raise ConversionError(REASON_NO_ASSISTANT, "no assistant message to train on")
    return out
