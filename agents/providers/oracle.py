"""The task oracle as a LiteLLM custom provider: `oracle/<family>` is called exactly like a model.

Each call reaches the conversation's state on the oracle's own copy of the environment: the assistant tool
calls so far are executed on it (tools are deterministic, so this reaches the same state as the rollout's
environment) and the family's `oracle_action(env, history)` gives the next tool call or the final answer.
Environments stay alive between the calls of a conversation (`LiveEnvCache`), so each call executes only
the new tool calls.

Instructions need not be unique within a family (templated tasks repeat them), so a caller that knows the
instance passes its id as `extra_body={"instance_id": ...}` (the rollout runtime does); the instruction match
is the fallback for callers that only have the conversation.

Inside a rollout of this process the oracle replays nothing: the rollout shares its environment
(agents/shared_env.py, the `env_key` in `extra_body`) and the oracle plans from that environment's state and
`steps`, the calls it really executed (a call a harness hook blocked, a helper or a malformed call is not
among them; a composite call is there as the environment calls it expanded into).

Limit of the replay path (no shared environment): a call that a harness hook blocked never reached the real
environment but is replayed here; the oracle acts from the state it then sees (it is state-based, so it still
solves the task where that is possible).
"""

from __future__ import annotations

import atexit
import functools
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import litellm
from litellm import CustomLLM

import tasks
from agents import shared_env
from agents.records import parse_tool_calls
from tasks.base import Environment, Family
from tasks.records import FinalAnswer, Step, TaskInstance, ToolCall


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
    calls: list[ToolCall] = []
    for m in messages:
        if m.get("role") == "assistant":
            calls.extend(parse_tool_calls(m.get("tool_calls")))
    return calls


def resolve_instance(family: str, messages: list[dict[str, Any]], instance_id: str | None) -> TaskInstance:
    if instance_id is None:
        return find_instance(family, messages)
    if not instance_id.startswith(f"{family}/"):
        raise OracleError(f"instance '{instance_id}' is not a {family} instance")
    return tasks.instance(instance_id)


async def oracle_reply(family: str, messages: list[dict[str, Any]], instance_id: str | None = None) -> ToolCall | FinalAnswer:
    """One-shot: a fresh environment, the whole conversation replayed, the oracle's next action."""
    inst = resolve_instance(family, messages, instance_id)
    fam = tasks.get(family)
    env = fam.make_env(inst)
    try:
        history = await env.replay(tool_calls_in(messages))
        return fam.oracle_action(env, history)
    finally:
        env.close()


def _signature(call: ToolCall) -> tuple[str, str]:
    return call.name, call.arguments_json()  # call ids differ between runs; what was done does not


@dataclass
class _LiveEnv:
    env: Environment
    history: list[Step] = field(default_factory=list)

    def continues(self, instance_id: str, calls: list[ToolCall]) -> bool:
        done = [_signature(s.call) for s in self.history]
        return self.env.instance.id == instance_id and [_signature(c) for c in calls[: len(done)]] == done


class LiveEnvCache:
    """Environments kept alive between the calls of one conversation, so each call only executes the tool
    calls made since the last one (a fresh browser and a full replay per call made the browser oracles
    ~60 s per episode). Bounded: the least recently used environment is closed when the cache is full."""

    def __init__(self, max_envs: int = 8) -> None:
        self.max_envs = max_envs
        self._live: OrderedDict[int, _LiveEnv] = OrderedDict()
        self._next = 0

    def take(self, instance_id: str, calls: list[ToolCall]) -> _LiveEnv | None:
        """Remove and return a live env this conversation continues (so a concurrent caller cannot share it)."""
        for key, live in self._live.items():
            if live.continues(instance_id, calls):
                return self._live.pop(key)
        return None

    def put(self, live: _LiveEnv) -> None:
        self._live[self._next] = live
        self._next += 1
        while len(self._live) > self.max_envs:
            _, old = self._live.popitem(last=False)
            old.env.close()

    def close(self) -> None:
        while self._live:
            _, live = self._live.popitem()
            live.env.close()


class OracleLLM(CustomLLM):
    """LiteLLM handler for `oracle/<family>` models, with live environments reused across calls. A subclass
    with another `provider` name and `action` is a policy of ours served the same way (agents/providers/showwork.py)."""

    provider = "oracle"

    def __init__(self, max_live_envs: int = 8) -> None:
        super().__init__()
        self.cache = LiveEnvCache(max_live_envs)
        atexit.register(self.cache.close)

    def split_name(self, name: str) -> tuple[str, str]:
        """'<family>' -> (family, ''): the oracle has no variants; a subclass may accept '<family>@<variant>'."""
        if "@" in name:
            raise OracleError(f"'{self.provider}/{name}': {self.provider} models take no '@' variant")
        return name, ""

    def action(self, fam: Family, env: Environment, history: list[Step], variant: str = "") -> ToolCall | FinalAnswer:
        """The next action from the environment's state and the steps that led there."""
        return fam.oracle_action(env, history)

    async def next_action(self, name: str, messages: list[dict[str, Any]], instance_id: str | None,
                          env_key: object = None) -> ToolCall | FinalAnswer:
        family, variant = self.split_name(name)
        inst = resolve_instance(family, messages, instance_id)
        fam = tasks.get(family)
        shared = shared_env.lookup(env_key, inst.id)
        if shared is not None:  # the rollout's own environment, in this process: nothing to replay
            return self.action(fam, shared, list(shared.steps), variant)
        calls = tool_calls_in(messages)
        live = self.cache.take(inst.id, calls)
        if live is None:
            live = _LiveEnv(fam.make_env(inst))
            live.env.reset()
        try:
            for call in calls[len(live.history):]:
                live.history.append(Step(call=call, result=await live.env.call(call.name, call.arguments)))
            action = self.action(fam, live.env, live.history, variant)
        except BaseException:
            live.env.close()
            raise
        if isinstance(action, FinalAnswer):
            live.env.close()  # the conversation is over
        else:
            self.cache.put(live)
        return action

    async def acompletion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> litellm.ModelResponse:
        family = model.split("/", 1)[-1]  # '<family>' or, for a provider with variants, '<family>@<variant>'
        extra = (kwargs.get("optional_params") or {}).get("extra_body") or {}
        action = await self.next_action(family, messages, extra.get("instance_id"), extra.get("env_key"))
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
            model=f"{self.provider}/{family}",
            choices=[{"index": 0, "message": message, "finish_reason": finish}],
            usage={"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        )

    def completion(self, *args: Any, **kwargs: Any) -> litellm.ModelResponse:  # sync path, for completeness
        import asyncio

        return asyncio.run(self.acompletion(*args, **kwargs))

