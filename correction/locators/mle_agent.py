"""`mle_agent:MODEL`: an LLM agent (any LiteLLM model in the `locator` role) investigates a failing rollout with
tools and answers t*, a category and a rationale as a structured tool call.

Tools: `read_turn(turn)` (the student's assistant message and its tool results), `failed_checks()` (the
verifier's failed checks and feedback), `replay(turn, tool, arguments)` (a fresh environment rebuilt to the
state after the student's first `turn` turns - the calls that ran, re-executed - then one tool call on it,
e.g. a read, to inspect that state), and `answer(t_star, category, rationale)`. An invalid answer (a turn out
of range, a category outside the ontology) comes back as a tool error; no valid answer within `max_steps`
model calls, or a failed model call, gives no t* with the reason. The agent only sees the view. Everything the
student, its tools or the verifier wrote (the task text, turns, tool results, replayed results, feedback) reaches
it only inside data blocks its instructions name as data never to be followed (harness/data_blocks.py).
"""

from __future__ import annotations

from typing import Any

from agents.client import ModelCallError, ModelClient, ModelResponse
from agents.records import ModelRole, Trajectory
from agents.role_calls import RoleCallLog, call_record, cut_note, role_for, strip_think
from analysis.attribution.judge import _json_object
from analysis.attribution.ontology import CATEGORIES
from correction.records import Localization
from correction.runner import RolloutFn
from harness.data_blocks import DATA_RULE, data_block
from harness.hooks import BLOCKED_PREFIX, NOT_RUN
from harness.program import Harness
from tasks.records import ToolCall

CLIP = 1500


def _fn(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": description, "parameters": {
        "type": "object", "properties": props, "required": required}}}


TOOLS = [
    _fn("read_turn", "The student's assistant turn and its tool results.", {"turn": {"type": "integer"}}, ["turn"]),
    _fn("failed_checks", "The verifier's failed checks and feedback.", {}, []),
    _fn("replay", "Rebuild the environment after the student's first `turn` turns and make one tool call on it.",
        {"turn": {"type": "integer"}, "tool": {"type": "string"}, "arguments": {"type": "object"}}, ["turn", "tool"]),
    _fn("answer", "Your final answer: the 0-based turn whose action made the task fail.",
        {"t_star": {"type": "integer"}, "category": {"type": "string", "enum": list(CATEGORIES)},
         "rationale": {"type": "string"}}, ["t_star", "category", "rationale"]),
]
SYSTEM = ("You find the turn where an AI agent's failed episode went wrong: the earliest turn whose action made the "
          "task fail. Investigate with the tools, then call `answer` once. The task text and every tool result "
          f"come as data blocks. {DATA_RULE}")


def text_calls(resp: ModelResponse) -> list[ToolCall]:
    """Tool calls a model wrote as text (no tool parser on its server, or a model that answers in prose):
    `{"name": ..., "arguments": {...}}` (also inside <tool_call>), or the answer's own fields `{"t_star": ...}`."""
    text = strip_think(resp.content).replace("<tool_call>", "").replace("</tool_call>", "")
    try:
        obj = _json_object(text) if text else None
    except ValueError:
        return []
    if isinstance(obj, dict) and isinstance(obj.get("name"), str):
        args = obj.get("arguments")
        return [ToolCall(id="text_0", name=obj["name"], arguments=args if isinstance(args, dict) else {})]
    if isinstance(obj, dict) and "t_star" in obj:
        return [ToolCall(id="text_0", name="answer", arguments=obj)]
    return []


def _unusable(resp: ModelResponse, calls: list[ToolCall]) -> str:
    """Why a reply gives the agent nothing to run ('' when it does)."""
    if not calls:
        return "the reply is empty" if not resp.content.strip() else "the reply holds no tool call"
    bad = [c.name for c in calls if isinstance(c.arguments, str)]
    return f"the arguments of {', '.join(bad)} are not a JSON object" if bad else ""


class MleAgentLocator:
    """`role`: the run's `locator` role record (api_base, api_key_env, max_tokens, timeout_s, prices), called as
    `model`; `calls`: where each call's cost and outcome go (the run's role-call log and spend cap)."""

    def __init__(self, model: str, *, role: ModelRole | None = None, api_base: str | None = None,
                 max_steps: int = 12, max_tokens: int | None = None, client: ModelClient | None = None,
                 calls: RoleCallLog | None = None, **_: Any) -> None:
        self.name = f"mle_agent:{model}"
        self.max_steps = max_steps
        self.role = role_for(model, role, api_base=api_base, max_tokens=max_tokens)
        self.client = client or ModelClient(self.role)
        self.calls = calls or RoleCallLog()

    async def _step(self, messages: list[dict[str, Any]]) -> tuple[ModelResponse | None, list[ToolCall], str]:
        """One model call: (the reply, the calls to run, why it is unusable); recorded in `calls`."""
        self.calls.check()
        try:
            resp = await self.client.complete(messages, TOOLS)
        except ModelCallError as e:
            self.calls.record(call_record("locator", self.role, None, False, f"model call failed: {e}"))
            return None, [], f"model call failed: {e}"
        calls = resp.tool_calls or text_calls(resp)
        reason = _unusable(resp, calls)
        reason += cut_note(resp, self.role, "locator") if reason else ""
        self.calls.record(call_record("locator", self.role, resp, not reason, reason))
        return resp, ([] if reason else calls), reason

    async def _replay(self, view: Trajectory, turn: int, tool: str, arguments: Any) -> str:
        import tasks

        env = tasks.make_env(view.instance)
        try:
            ran = [c for t in view.turns[:turn] for c, r in zip(t.tool_calls, t.tool_results, strict=False)
                   if not r.content.startswith((BLOCKED_PREFIX, NOT_RUN)) and not isinstance(c.arguments, str)]
            names = {s.name for s in env.tools()}
            await env.replay([c for c in ran if c.name in names])
            return (await env.call(tool, arguments or {})).content
        finally:
            env.close()

    async def _tool(self, view: Trajectory, call: ToolCall) -> tuple[str, Localization | None]:
        a = call.arguments if isinstance(call.arguments, dict) else {}
        n = len(view.turns)
        if call.name == "failed_checks":
            return data_block("failed_checks", {"failed": view.verdict.failed_checks,
                                                "feedback": view.verdict.feedback[:CLIP]}), None
        if call.name in ("read_turn", "replay", "answer"):
            key = "t_star" if call.name == "answer" else "turn"
            if isinstance(a.get(key), str) and a[key].strip().isdigit():  # "3": a model that quotes numbers
                a = {**a, key: int(a[key])}
            k = a.get(key)
            hi = n if call.name == "replay" else n - 1
            if not isinstance(k, int) or not 0 <= k <= hi:
                return f"Error: the turn must be an integer in 0..{hi}", None
        if call.name == "read_turn":
            t = view.turns[a["turn"]]
            results = [r.content[:CLIP] for r in t.tool_results]
            return data_block("turn", {"assistant": t.assistant, "results": results}), None
        if call.name == "replay":
            seen = await self._replay(view, a["turn"], str(a.get("tool")), a.get("arguments"))
            return data_block("replay", seen[:CLIP]), None
        if call.name == "answer":
            if a.get("category") not in CATEGORIES:
                return f"Error: category must be one of {', '.join(CATEGORIES)}", None
            return "ok", Localization(t_star=a["t_star"], category=a["category"], locator=self.name,
                                      rationale=str(a.get("rationale") or "")[:2000])
        return f"Error: unknown tool '{call.name}'", None

    async def locate(self, trajectory: Trajectory, harness: Harness, run: RolloutFn) -> Localization:
        view = trajectory.require_view(self.name)
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": (
            f"The task the agent was given:\n{data_block('task', view.instance.instruction)}\n"
            f"The episode has {len(view.turns)} turns (0..{len(view.turns) - 1}), "
            f"stopped with '{view.stop_reason}', score {view.score:.2f}.")}]
        last, failed_calls = "", 0
        for _ in range(self.max_steps):
            resp, calls, reason = await self._step(messages)
            if resp is None:
                last, failed_calls = reason, failed_calls + 1
                if failed_calls == 2:  # the client already retried transient errors: stop after two in a row
                    break
                continue
            failed_calls = 0
            messages.append({"role": "assistant", "content": resp.content or None,
                             **({"tool_calls": resp.message["tool_calls"]} if resp.tool_calls else {})})
            if reason:
                last = reason
                messages.append({"role": "user", "content": f"{reason}. Call `answer` with t_star, category and "
                                                            "rationale (or a tool to investigate)."})
            for call in calls:
                content, found = await self._tool(view, call)
                if found is not None:
                    return found
                last = content if content.startswith("Error") else last
                result = {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": content}
                messages.append(result if resp.tool_calls else {"role": "user", "content": f"Result of {call.name}: "
                                                                                           f"{content}"})
        why = f"no valid answer in {self.max_steps} model calls" + (f"; last: {last}" if last else "")
        return Localization(t_star=None, category="unattributed", locator=self.name, rationale=why)
