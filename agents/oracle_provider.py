"""The task oracle as a LiteLLM custom provider: `oracle/<family>` is called exactly like a model.

Each call rebuilds the environment from the conversation: the first user message identifies the instance
(exact instruction match within the family), the assistant tool calls so far are replayed on a fresh
environment (tools are deterministic, so this reaches the same state), and the family's
`oracle_action(env, history)` gives the next tool call or the final answer.

Limit, by design: a call that a harness hook blocked never reached the real environment but is replayed
here; the oracle acts from the state it then sees (it is state-based, so it still solves the task where
that is possible).
"""

from __future__ import annotations

import functools
from typing import Any

import litellm
from litellm import CustomLLM

import tasks
from tasks.records import FinalAnswer, TaskInstance, ToolCall


class OracleError(RuntimeError):
    pass


@functools.cache
def _instruction_index(family: str) -> dict[str, TaskInstance]:
    # Pure function of the family's seeded generator: caching it is memoisation, not shared state.
    return {inst.instruction: inst for inst in tasks.instances(family)}


def find_instance(family: str, messages: list[dict[str, Any]]) -> TaskInstance:
    index = _instruction_index(family)
    for m in messages:
        if m.get("role") == "user" and isinstance(m.get("content"), str):
            content = m["content"]
            if content in index:
                return index[content]
            for instruction, inst in index.items():  # a harness may wrap the instruction in more text
                if instruction in content:
                    return inst
    raise OracleError(f"no {family} instance matches the conversation's user message")


def tool_calls_in(messages: list[dict[str, Any]]) -> list[ToolCall]:
    from agents.client import parse_tool_calls

    calls: list[ToolCall] = []
    for m in messages:
        if m.get("role") == "assistant":
            calls.extend(parse_tool_calls(m.get("tool_calls")))
    return calls


async def oracle_reply(family: str, messages: list[dict[str, Any]]) -> ToolCall | FinalAnswer:
    inst = find_instance(family, messages)
    fam = tasks.get(family)
    env = fam.make_env(inst)
    try:
        history = await env.replay(tool_calls_in(messages))
        return fam.oracle_action(env, history)
    finally:
        env.close()


class OracleLLM(CustomLLM):
    """LiteLLM handler for `oracle/<family>` models."""

    async def acompletion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> litellm.ModelResponse:
        family = model.split("/", 1)[-1]
        action = await oracle_reply(family, messages)
        if isinstance(action, FinalAnswer):
            message: dict[str, Any] = {"role": "assistant", "content": action.text}
            finish = "stop"
        else:
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{
                    "id": f"call_{len(tool_calls_in(messages))}",  # deterministic ids
                    "type": "function",
                    "function": {"name": action.name, "arguments": action.arguments_json()},
                }],
            }
            finish = "tool_calls"
        return litellm.ModelResponse(
            model=f"oracle/{family}",
            choices=[{"index": 0, "message": message, "finish_reason": finish}],
            usage={"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        )

    def completion(self, *args: Any, **kwargs: Any) -> litellm.ModelResponse:  # sync path, for completeness
        import asyncio

        return asyncio.run(self.acompletion(*args, **kwargs))

