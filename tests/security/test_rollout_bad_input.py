"""The rollout runtime absorbs a model's bad tool calls (#12 §6): arguments nested arbitrarily deep are a
malformed call (an error tool message, the turn kept), and calls past `Limits.max_tool_calls_per_turn` in one
reply are answered with one message naming the cap. Real runtime, real client, the scripted model."""

from __future__ import annotations

import pytest

from agents.prefix import prefix_of
from agents.rollout import Limits, run_episode
from agents.tool_args import MAX_ARGS_DEPTH, OVER_CAP_PREFIX, json_depth, parse_arguments
from agents.tables.trajectories import read_trajectories, write_trajectories
from harness import Harness, PromptSection
from scripted_model import Step, counter_env, scripted

ROLE = Harness(sections=[PromptSection(id="role", kind="role", text="You add numbers.")])
DEEP = 10_000

DEEP_ARGUMENTS = {
    "list": '{"n": ' + "[" * DEEP + "]" * DEEP + "}",
    "object": '{"a":' * DEEP + "1" + "}" * DEEP,
    "list_unclosed": "[" * DEEP,
    "just_over_the_cap": '{"n": ' + "[" * MAX_ARGS_DEPTH + "]" * MAX_ARGS_DEPTH + "}",
}


@pytest.mark.parametrize("shape", sorted(DEEP_ARGUMENTS))
async def test_deeply_nested_arguments_are_a_malformed_call_and_the_turn_is_kept(shape, tmp_path):
    raw = DEEP_ARGUMENTS[shape]
    role, script = scripted([Step(calls=[("add", raw), ("add", {"n": 5})]), Step(text="5")])
    env = counter_env(5)
    traj = await run_episode(role, ROLE, env, seed=0)
    assert traj.stop_reason == "submitted" and traj.score == 1.0 and traj.error == ""
    first = traj.turns[0]
    assert first.malformed_tool_calls == 1 and len(first.tool_calls) == 2 and env.calls == [("add", 5)]
    bad = first.tool_results[0]
    assert bad.is_error and f"nested more than {MAX_ARGS_DEPTH} levels deep" in bad.content
    assert first.tool_calls[0].arguments == raw  # kept as the model sent it
    tool_msgs = [m for m in traj.messages if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_msgs] == [c.id for c in first.tool_calls]
    assert len(script.seen) == 2 and script.seen[1][-2]["content"] == bad.content  # the model saw the error
    # the trajectory stores and reads back, and a continuation from it replays (skipping the malformed call)
    write_trajectories(tmp_path / "t.parquet", [traj])
    back = read_trajectories(tmp_path / "t.parquet")[0]
    assert back.turns[0].tool_calls[0].arguments == raw
    role2, _ = scripted([Step(text="5")])
    env2 = counter_env(5)
    cont = await run_episode(role2, ROLE, env2, seed=0, prefix=prefix_of(traj, 1))
    assert cont.stop_reason == "submitted" and cont.score == 1.0 and env2.calls == [("add", 5)]
    env.close()
    env2.close()


async def test_an_environment_called_directly_with_deep_text_answers_an_error():
    env = counter_env(5)
    env.reset()
    for raw in (DEEP_ARGUMENTS["list_unclosed"], DEEP_ARGUMENTS["object"]):
        result = await env.call("add", raw)
        assert result.is_error and "nested too deeply" in result.content and env.calls == []
    env.close()


def test_depth_scan_ignores_brackets_in_strings_and_stops_early():
    assert json_depth('{"s": "[[[[{{{{\\"[[["}') == 1
    assert json_depth("[" * 10**6) == MAX_ARGS_DEPTH + 1  # stops at the cap, whatever the length
    at_cap = '{"n": ' + "[" * (MAX_ARGS_DEPTH - 1) + "]" * (MAX_ARGS_DEPTH - 1) + "}"
    assert isinstance(parse_arguments(at_cap), dict)  # the cap itself still parses (tools then cap per argument)
    assert parse_arguments('{"n": 1}') == {"n": 1} and parse_arguments("") == {} and parse_arguments("[1]") == "[1]"


async def test_calls_past_the_per_turn_cap_are_answered_with_one_message():
    assert Limits().max_tool_calls_per_turn == 32
    role, script = scripted([Step(calls=[("add", {"n": 1})] * 40), Step(text="32")])
    env = counter_env(32)
    traj = await run_episode(role, ROLE, env, seed=0)
    assert traj.stop_reason == "submitted" and traj.score == 1.0
    assert len(env.calls) == 32 and env.total == 32
    results = traj.turns[0].tool_results
    assert len(results) == 40 and not any(r.is_error for r in results[:32])
    skipped = {r.content for r in results[32:]}
    assert len(skipped) == 1 and all(r.is_error for r in results[32:])
    (message,) = skipped
    assert message.startswith(OVER_CAP_PREFIX) and "40 calls; the limit is 32 per turn" in message and "33-40" in message
    answered = [m["tool_call_id"] for m in script.seen[1] if m["role"] == "tool"]
    assert len(answered) == 40 and len(set(answered)) == 40  # every call id answered: the conversation stays valid
    env.close()


async def test_a_lower_cap_and_a_continuation_replays_only_the_calls_that_ran():
    limits = Limits(max_tool_calls_per_turn=2)
    role, _ = scripted([Step(calls=[("add", {"n": 1})] * 5), Step(calls=[("add", {"n": 3})]), Step(text="5")])
    env = counter_env(5)
    traj = await run_episode(role, ROLE, env, seed=0, limits=limits)
    assert env.calls == [("add", 1)] * 2 + [("add", 3)] and traj.score == 1.0
    role2, _ = scripted([Step(text="5")])
    env2 = counter_env(5)
    cont = await run_episode(role2, ROLE, env2, seed=0, prefix=prefix_of(traj, 2), limits=limits)
    assert env2.calls == env.calls and cont.stop_reason == "submitted" and cont.score == 1.0
    with pytest.raises(ValueError):
        Limits(max_tool_calls_per_turn=0)
    env.close()
    env2.close()
