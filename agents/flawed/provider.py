"""`flawed/<family>@<profile>`: the task oracle with injected, labelled faults, as a LiteLLM custom provider.

Called like any model (`ModelClient(ModelRole(model="flawed/stock_alert@native"))`). It reads what every
provider of ours reads: the conversation, the tools, and what `ModelClient.complete(..., context=...)` puts in
`extra_body`: the instance id and, from a seeded rollout, the episode seed and the turn (a bare call's per-turn
`seed` is read as `episode_seed * 1000 + turn`). Each injected fault
travels back in the assistant message's `provider_specific_fields["injected_faults"]` (a list of
`InjectedFault` dicts); `ModelClient` copies it to `ModelResponse.injected_faults` and the rollout to
`Trajectory.injected_faults`, the ground truth only measurement code reads (`Trajectory.view()` drops it).

Draws come from `random.Random` seeded by (model string, instance id, episode seed and turn), so the same
rollout seed gives the same faults. It is a simulation: what it shows about a pipeline is measured against a
policy whose faults are known, not against a real model's.
"""

from __future__ import annotations

import atexit
import functools
import hashlib
import random
from typing import Any

import litellm
from litellm import CustomLLM

import tasks
from agents.flawed.families import menu_for
from agents.flawed.generic import TOOL_USE_KINDS
from agents.flawed.knowledge import stated_keys
from agents.flawed.menu import Action
from agents.flawed.policy import Student
from agents.flawed.profiles import PER_TURN_KINDS, Profile, parse_profile
from agents.flawed.state import BLOCKED, Conversation, ConversationStore, FlawedError, signature
from agents.providers.oracle import resolve_instance
from agents.records import InjectedFault, parse_tool_calls
from agents.seeds import episode_draw
from tasks.base import Environment, Family
from tasks.records import FinalAnswer, TaskInstance, ToolCall

FAULTS_FIELD = "injected_faults"


def split_model(model: str) -> tuple[str, str]:
    """'flawed/stock_alert@native' or 'stock_alert@native' -> ('stock_alert', 'native')."""
    name = model.split("/", 1)[1] if model.startswith("flawed/") else model
    family, sep, spec = name.partition("@")
    if not sep or not spec:
        raise FlawedError(f"flawed model '{model}' needs a profile: flawed/<family>@<profile>")
    if family not in tasks.families():
        raise FlawedError(f"unknown family '{family}' in '{model}'; families: {', '.join(tasks.families())}")
    return family, spec


@functools.cache
def profile_for(family: str, spec: str) -> Profile:
    known = menu_for(family).kinds() | set(PER_TURN_KINDS) | set(TOOL_USE_KINDS) | {"tool_use"}
    try:
        return parse_profile(spec, known)
    except ValueError as e:
        raise FlawedError(str(e)) from None


def turn_rng(model: str, instance_id: str, seed: int | None, turn: int) -> random.Random:
    digest = hashlib.sha256(f"{model}|{instance_id}|{seed}|{turn}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def example_tools(tools: list[dict[str, Any]] | None) -> frozenset[str]:
    return frozenset(str((t.get("function") or {}).get("name")) for t in tools or []
                     if "Example arguments:" in str((t.get("function") or {}).get("description") or ""))


class FlawedLLM(CustomLLM):
    """LiteLLM handler for `flawed/<family>@<profile>` models (one per process, registered by
    agents.providers.registry)."""

    def __init__(self, max_live_envs: int = 8) -> None:
        super().__init__()
        self.store = ConversationStore(max_envs=max_live_envs)
        atexit.register(self.store.close)

    async def respond(self, model: str, messages: list[dict[str, Any]], instance_id: str | None, seed: int | None,
                      tools: list[dict[str, Any]] | None = None,
                      where: tuple[int, int] | None = None) -> tuple[Action, InjectedFault | None]:
        """`where` = (turn, episode seed), which a seeded rollout sends; without it a per-turn `seed` is read as
        episode * 1000 + turn, and without either the turn is the count of assistant messages."""
        family, spec = split_model(model)
        fam, profile = tasks.get(family), profile_for(family, spec)
        inst = resolve_instance(family, messages, instance_id)
        n_assistant = sum(m.get("role") == "assistant" for m in messages)
        if where is not None:
            (turn, episode), draw = where, episode_draw(where[1], where[0])
        elif seed is not None:
            turn, episode, draw = seed % 1000, seed // 1000, seed
        else:
            turn, episode, draw = n_assistant, 0, None
        system = next((str(m.get("content") or "") for m in messages if m.get("role") == "system"), "")
        key = (model, inst.id, episode, hashlib.sha256(system.encode()).hexdigest()[:16])
        visible = [signature(m) for m in messages if m.get("role") == "assistant"]
        found = self.store.take(key, visible, turn)
        if found is None:
            conv, env = await self._fresh(key, fam, inst, profile, messages, turn, system, tools)
        else:
            conv, env = found[0], found[1] or await self._rebuild(fam, inst, found[0])
        try:
            student = Student(conv, env, fam)
            feedback = await student.absorb(messages)
            rng = turn_rng(model, inst.id, draw, turn)
            await student.react(feedback, rng)
            action, fault = await student.act(messages, turn, rng)
        except BaseException:
            env.close()
            raise
        if isinstance(action, FinalAnswer):  # usually the end: free the environment (rebuilt if refused)
            env.close()
            self.store.put(conv, None)
        else:
            self.store.put(conv, env)
        return action, fault

    async def _fresh(self, key: tuple[str, str, int, str], fam: Family, inst: TaskInstance, profile: Profile,
                     messages: list[dict[str, Any]], turn: int, system: str,
                     tools: list[dict[str, Any]] | None) -> tuple[Conversation, Environment]:
        visible = [m for m in messages if m.get("role") == "assistant"]
        if turn > len(visible):
            raise FlawedError(f"turn {turn} of {inst.id} arrives with only {len(visible)} assistant messages (a "
                              "context window) and this provider holds no state for it")
        answers = {m.get("tool_call_id"): str(m.get("content") or "") for m in messages if m.get("role") == "tool"}
        calls = [c for m in visible for c in parse_tool_calls(m.get("tool_calls"))]
        executed = [c for c in calls if c.id in answers and not answers[c.id].startswith(BLOCKED)]
        env = fam.make_env(inst)
        try:
            history = await env.replay(executed)
        except BaseException:
            env.close()
            raise
        conv = Conversation(key=key, menu=menu_for(inst.family), profile=profile,
                            stated=stated_keys(inst.family, system), example_tools=example_tools(tools),
                            emitted=[signature(m) for m in visible], n_calls=len(calls), actual=list(executed),
                            belief_calls=list(executed), history=history)
        return conv, env

    @staticmethod
    async def _rebuild(fam: Family, inst: TaskInstance, conv: Conversation) -> Environment:
        env = fam.make_env(inst)
        try:
            await env.replay(conv.belief_calls)
        except BaseException:
            env.close()
            raise
        return env

    async def acompletion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> litellm.ModelResponse:
        opt = kwargs.get("optional_params") or {}
        extra = opt.get("extra_body") or {}
        where = (int(extra["turn"]), int(extra["episode_seed"])) if "turn" in extra else None
        action, fault = await self.respond(model, messages, extra.get("instance_id"), opt.get("seed"), opt.get("tools"),
                                           where)
        message: dict[str, Any] = {"role": "assistant", "content": None,
                                   "provider_specific_fields": {FAULTS_FIELD: [fault.model_dump()] if fault else []}}
        if isinstance(action, FinalAnswer):
            message["content"], finish = action.text, "stop"
        else:
            message["tool_calls"] = [_openai_call(action)]
            finish = "tool_calls"
        return litellm.ModelResponse(model=f"flawed/{model}", choices=[{"index": 0, "message": message,
                                                                         "finish_reason": finish}],
                                     usage={"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0})

    def completion(self, *args: Any, **kwargs: Any) -> litellm.ModelResponse:  # sync path, for completeness
        import asyncio

        return asyncio.run(self.acompletion(*args, **kwargs))


def _openai_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments_json()}}
