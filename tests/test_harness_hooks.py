"""Hooks: the pure decisions (`harness.hooks.decide`), then their effects through the real rollout runtime.

The model is a scripted LiteLLM provider (tests/scripted_model.py) so every call is known; the environment
is a small counter whose `calls` list shows exactly what reached it.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agents.rollout import BLOCKED_PREFIX, HOOK_PREFIX, NOT_RUN, Limits, run_episode
from harness import Harness, Hook, PromptSection
from harness.context import ContextPolicy
from harness.hooks import FinishEvent, HookState, ModelCallEvent, ToolCallEvent, ToolErrorEvent, decide
from harness.program import ToolPolicy
from scripted_model import Step, counter_env, scripted


def _h(*hooks: dict, **kw) -> Harness:
    return Harness(sections=[PromptSection(id="role", kind="role", text="You add numbers.")],
                   hooks=[Hook.model_validate(h) for h in hooks], **kw)


def _user_texts(messages: list[dict]) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "user"]


def _hooks(*specs: dict) -> list[Hook]:
    return [Hook.model_validate(h) for h in specs]


def test_decide_tool_call_in_order_until_the_first_block():
    hooks = _hooks({"id": "warn", "when": {"on": "before_tool_call", "tool": "add"}, "then": {"do": "inject", "message": "adding"},
                    "max_fires": 1},
                   {"id": "no-3", "when": {"on": "before_tool_call", "args": r'"n": 3\b'}, "then": {"do": "block", "message": "no 3"}},
                   {"id": "later", "when": {"on": "before_tool_call"}, "then": {"do": "stop"}})
    call = ToolCallEvent(turn=0, tool="add", args_json='{"n": 3}', repeats=1)
    got = decide(hooks, call, HookState())
    assert [(d.hook_id, d.effect, d.message) for d in got] == [
        ("warn", "inject", HOOK_PREFIX + "adding"), ("no-3", "block", BLOCKED_PREFIX + "no 3")]
    assert got[1].detail == "before_tool_call->block: add"
    # max_fires reached: `warn` is skipped; another call reaches the stop hook, whose text names it
    other = decide(hooks, call.model_copy(update={"args_json": '{"n": 4}'}), HookState(fires={"warn": 1}))
    assert [(d.hook_id, d.effect, d.message) for d in other] == [("later", "stop", "stopped by hook 'later'")]
    assert decide(hooks, ToolErrorEvent(turn=0, tool="add", args_json="{}"), HookState()) == []


def test_decide_repeats_turns_context_and_finish():
    loop = _hooks({"id": "loop", "when": {"on": "repeated_call", "n": 3}, "then": {"do": "inject", "message": "again"}})
    assert [len(decide(loop, ToolCallEvent(turn=0, tool="t", args_json="{}", repeats=r), HookState())) for r in (1, 2, 3, 4)] == [0, 0, 1, 1]
    timed = _hooks({"id": "t1", "when": {"on": "at_turn", "turn": 1}, "then": {"do": "stop", "message": "enough"}},
                   {"id": "big", "when": {"on": "context_size", "chars": 100}, "then": {"do": "inject", "message": "large"}})
    assert decide(timed, ModelCallEvent(turn=0, context_chars=50), HookState()) == []
    assert [d.hook_id for d in decide(timed, ModelCallEvent(turn=0, context_chars=150), HookState())] == ["big"]
    assert decide(timed, ModelCallEvent(turn=0, context_chars=150), HookState(fires={"big": 1})) == []  # once
    assert [d.effect for d in decide(timed, ModelCallEvent(turn=1, context_chars=150), HookState())] == ["stop"]
    finish = _hooks({"id": "need", "when": {"on": "on_finish"}, "then": {"do": "require", "tool": "add|sub"}},
                    {"id": "nudge", "when": {"on": "on_finish"}, "then": {"do": "inject", "message": "check twice"}})
    refused = decide(finish, FinishEvent(turn=2), HookState())
    assert [(d.effect, d.message) for d in refused] == [
        ("refuse", HOOK_PREFIX + "Before finishing you must call the tool matching 'add|sub' successfully."),
        ("refuse", HOOK_PREFIX + "check twice")]
    assert [d.hook_id for d in decide(finish, FinishEvent(turn=2), HookState(succeeded=frozenset({"sub"})))] == ["nudge"]


async def test_blocked_call_never_reaches_environment():
    role, script = scripted([Step(calls=[("add", {"n": 3})]), Step(calls=[("add", {"n": 5})]), Step(text="total is 5")])
    h = _h({"id": "no-3", "when": {"on": "before_tool_call", "tool": "add", "args": r'"n": 3\b'},
            "then": {"do": "block", "message": "3 is not allowed"}})
    env = counter_env(5)
    traj = await run_episode(role, h, env, seed=0)
    assert env.calls == [("add", 5)]  # the blocked add(3) never ran
    assert env.total == 5 and traj.stop_reason == "submitted" and traj.score == 1.0
    assert traj.turns[0].tool_results[0].content == BLOCKED_PREFIX + "3 is not allowed"
    assert [(t.component_id, t.turn, t.kind) for t in traj.turns[0].triggers] == [("hook:no-3", 0, "hook")]
    assert traj.turns[1].triggers == []
    # the model saw the block message as the tool answer
    assert script.seen[1][-1] == {"role": "tool", "tool_call_id": "s0_0", "name": "add", "content": BLOCKED_PREFIX + "3 is not allowed"}
    env.close()


async def test_inject_before_call_and_after_tool_error():
    role, script = scripted([Step(calls=[("fail", {}), ("add", {"n": 5})]), Step(text="ok")])
    h = _h({"id": "warn-add", "when": {"on": "before_tool_call", "tool": "add"}, "then": {"do": "inject", "message": "adding"}},
           {"id": "on-err", "when": {"on": "after_tool_error", "tool": "f.*"}, "then": {"do": "inject", "message": "read the error"}})
    env = counter_env(5)
    traj = await run_episode(role, h, env, seed=0)
    assert env.calls == [("fail", None), ("add", 5)]
    second = script.seen[1]
    # both tool answers come right after the assistant message, then the injected user messages
    assert [m["role"] for m in second[-4:]] == ["tool", "tool", "user", "user"]
    assert _user_texts(second)[-2:] == [HOOK_PREFIX + "read the error", HOOK_PREFIX + "adding"]
    assert {t.component_id for t in traj.turns[0].triggers} == {"hook:warn-add", "hook:on-err"}
    assert traj.turns[0].tool_results[0].is_error and traj.stop_reason == "submitted"
    env.close()


async def test_repeated_identical_calls_are_blocked_from_the_nth():
    role, _ = scripted([Step(calls=[("get_total", {})])] * 4 + [Step(calls=[("add", {"n": 5})])])
    h = _h({"id": "loop", "when": {"on": "repeated_call", "n": 3}, "then": {"do": "block", "message": "you already know"}})
    env = counter_env(5)
    traj = await run_episode(role, h, env, seed=0)
    assert env.calls == [("get_total", None), ("get_total", None), ("add", 5)]
    fired = [t.turn for r in traj.turns for t in r.triggers if t.component_id == "hook:loop"]
    assert fired == [2, 3]
    assert traj.score == 1.0
    env.close()


async def test_at_turn_inject_and_stop():
    role, script = scripted([Step(calls=[("get_total", {})])] * 5)
    h = _h({"id": "t1", "when": {"on": "at_turn", "turn": 1}, "then": {"do": "inject", "message": "turn one"}},
           {"id": "t3", "when": {"on": "at_turn", "turn": 3}, "then": {"do": "stop", "message": "enough"}})
    env = counter_env(5)
    traj = await run_episode(role, h, env, seed=0)
    assert HOOK_PREFIX + "turn one" in _user_texts(script.seen[1])
    assert HOOK_PREFIX + "turn one" not in _user_texts(script.seen[0])
    assert traj.stop_reason == "harness_stop" and "stopped by hook 't3': enough" in traj.error
    assert len(traj.turns) == 3 and len(script.seen) == 3  # no model call at turn 3
    assert traj.verdict.failed_checks  # verified although not submitted
    assert any(t.component_id == "hook:t3" for t in traj.turns[-1].triggers)
    env.close()


async def test_require_tool_before_finishing():
    role, script = scripted([Step(text="done early"), Step(calls=[("add", {"n": 5})]), Step(text="done")])
    h = _h({"id": "need-add", "when": {"on": "on_finish"}, "then": {"do": "require", "tool": "add", "message": "call add first"}})
    env = counter_env(5)
    traj = await run_episode(role, h, env, seed=0)
    assert traj.stop_reason == "submitted" and env.final_answer.text == "done"
    assert len(traj.turns) == 3
    assert HOOK_PREFIX + "call add first" == script.seen[1][-1]["content"]
    assert [t.component_id for t in traj.turns[0].triggers] == ["hook:need-add"]
    assert traj.turns[2].triggers == []  # satisfied: did not fire again
    env.close()


async def test_finish_refusal_is_bounded_by_max_fires():
    role, _ = scripted([Step(text="a"), Step(text="b")])
    h = _h({"id": "need-add", "when": {"on": "on_finish"}, "then": {"do": "require", "tool": "add"}, "max_fires": 1})
    env = counter_env(5)
    traj = await run_episode(role, h, env, seed=0)
    assert traj.stop_reason == "submitted" and env.final_answer.text == "b" and env.calls == []
    env.close()


async def test_context_size_fires_once_and_stop_action_leaves_env_untouched():
    role, script = scripted([Step(calls=[("dump", {"size": 500})]), Step(calls=[("get_total", {})]), Step(calls=[("add", {"n": 1}), ("add", {"n": 2})])])
    h = _h({"id": "big", "when": {"on": "context_size", "chars": 300}, "then": {"do": "inject", "message": "context is large"}},
           {"id": "halt", "when": {"on": "before_tool_call", "tool": "add"}, "then": {"do": "stop", "message": "no adding"}})
    env = counter_env(5)
    traj = await run_episode(role, h, env, seed=0)
    assert sum(HOOK_PREFIX + "context is large" == t for t in _user_texts(script.seen[2])) == 1
    assert [t.turn for r in traj.turns for t in r.triggers if t.component_id == "hook:big"] == [1]
    assert traj.stop_reason == "harness_stop" and "stopped by hook 'halt'" in traj.error
    assert env.calls == [("dump", 500), ("get_total", None)]  # neither add ran
    last_tools = [m for m in traj.messages if m["role"] == "tool"][-2:]
    assert [m["content"] for m in last_tools] == [NOT_RUN, NOT_RUN]  # the conversation stays well-formed
    env.close()


async def test_malformed_calls_are_answered_and_counted_without_ending_the_run():
    role, script = scripted([Step(calls=[("add", "3006625"), ("nope", {}), ("add", {"n": "x"})]), Step(calls=[("add", {"n": 5})])])
    env = counter_env(5)
    traj = await run_episode(role, _h(), env, seed=0)
    t0 = traj.turns[0]
    assert t0.malformed_tool_calls == 2  # raw-string args and an unknown tool; a wrong type is the env's error
    assert [r.is_error for r in t0.tool_results] == [True, True, True]
    assert "JSON object" in t0.tool_results[0].content and "unknown tool 'nope'" in t0.tool_results[1].content
    assert traj.stop_reason == "submitted" and env.calls == [("add", 5)] and traj.score == 1.0
    env.close()


async def test_hidden_tool_is_unknown_and_helpers_run_in_the_runtime():
    role, script = scripted([Step(calls=[("calculator", {"expression": "2 + 3"}), ("notes", {"text": "total should be 5"}),
                                         ("get_total", {})]),
                             Step(calls=[("notes", {})]), Step(text="5")])
    h = _h(tools=ToolPolicy(hidden=["get_total"], helpers=["notes", "calculator"]))
    env = counter_env(5)
    traj = await run_episode(role, h, env, seed=0)
    names = [t["function"]["name"] for t in traj.tools]
    assert "get_total" not in names and {"notes", "calculator"} <= set(names)
    r0 = traj.turns[0].tool_results
    assert r0[0].content == "5" and r0[1].content == "1. total should be 5"
    assert "unknown tool 'get_total'" in r0[2].content and traj.turns[0].malformed_tool_calls == 1
    assert traj.turns[1].tool_results[0].content == "1. total should be 5"
    assert env.calls == []  # helpers never reach the environment
    kinds = [(t.component_id, t.kind) for t in traj.turns[0].triggers]
    assert kinds == [("tool:calculator", "helper_tool"), ("tool:notes", "helper_tool")]
    env.close()


async def test_tool_result_truncation_keeps_head_and_tail():
    role, script = scripted([Step(calls=[("dump", {"size": 5000})])])
    h = _h(context=ContextPolicy(max_tool_result_chars=300))
    env = counter_env(5)
    traj = await run_episode(role, h, env, seed=0)
    shown = script.seen[1][-1]["content"]
    assert shown.startswith("HEAD-") and shown.endswith("-TAIL") and "characters cut" in shown
    assert len(shown) < 400
    assert len(traj.turns[0].tool_results[0].content) == 5010  # the record keeps the real answer
    assert traj.turns[0].triggers[0].kind == "context_truncate"
    env.close()


async def test_keep_last_turns_omits_or_summarizes_older_turns():
    steps = [Step(calls=[("add", {"n": 1})]), Step(calls=[("add", {"n": 2})]), Step(calls=[("add", {"n": 2})]), Step(text="5")]
    role, script = scripted(steps)
    env = counter_env(5)
    traj = await run_episode(role, _h(context=ContextPolicy(keep_last_turns=1)), env, seed=0)
    third = script.seen[2]
    assert "earlier turn(s) are not shown" in third[2]["content"]
    assert sum(m["role"] == "assistant" for m in third) == 1 and third[1]["content"] == "Make the total 5."
    assert len(traj.messages) > len(third)  # the trajectory keeps everything
    assert traj.score == 1.0
    env.close()

    summarizer, sum_script = scripted([Step(text="added 1 so far")] * 5, input_cost_per_token=0.001)
    role, script = scripted(steps)
    env = counter_env(5)
    h = _h(context=ContextPolicy(keep_last_turns=1, summarize_with="sum"))
    traj = await run_episode(role, h, env, seed=0, summarizers={"sum": summarizer})
    assert "Summary of earlier turns:\nadded 1 so far" in script.seen[2][2]["content"]
    assert "add({\"n\": 1})" in sum_script.seen[0][1]["content"]
    assert any(t.kind == "context_summarize" for t in traj.turns[2].triggers)
    assert traj.turns[2].cost_usd == pytest.approx(0.1)  # the summarizer's cost is charged to the turn
    env.close()


def test_hook_validation_rejects_bad_rules():
    with pytest.raises(ValidationError, match="cannot follow trigger"):
        Hook.model_validate({"id": "x", "when": {"on": "at_turn", "turn": 1}, "then": {"do": "block", "message": "m"}})
    with pytest.raises(ValidationError, match="invalid regular expression"):
        Hook.model_validate({"id": "x", "when": {"on": "before_tool_call", "tool": "("}, "then": {"do": "stop"}})
    with pytest.raises(ValidationError):
        Hook.model_validate({"id": "x", "when": {"on": "sometimes"}, "then": {"do": "stop"}})
