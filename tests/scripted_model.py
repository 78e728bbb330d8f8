"""Test helpers: a scripted model behind LiteLLM's custom-provider interface and a tiny counter environment.

The scripted model is a stand-in for an external model (like the `oracle/<family>` provider): it goes
through the real `ModelClient` and the real rollout runtime, and answers call number i with `steps[i]`
(a final text once the script runs out). It records every conversation it was sent, so tests can check
what the model saw (injected messages, truncated tool results, context windows).

With `scripted(..., token_ids=True)` it also returns token ids the way a vLLM server does, from a fake but
deterministic chat template (`fake_prompt_ids`): each message is a role id, its JSON bytes and an end id, and
the generation prompt is the assistant role id, so a reply re-sent in the next prompt extends the previous
prompt + completion exactly, and a context window rewrites it.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

import litellm
from litellm import CustomLLM

from agents.providers.registry import register_own_providers
from agents.records import ModelRole
from tasks.base import Environment
from tasks.records import TaskInstance, Verdict
from tasks.tooling import ToolError, tool


@dataclass
class Step:
    """One scripted answer: tool calls [(name, arguments dict or raw string)] (with `content` beside them), or
    final text; optional delay;
    `finish` overrides the finish reason (e.g. "length" for a reply cut by the token limit)."""

    calls: list[tuple[str, Any]] = field(default_factory=list)
    text: str = "done"
    content: str | None = None  # text sent beside the calls (a reply that says what it does, then calls)
    sleep_s: float = 0.0
    finish: str | None = None


@dataclass
class Script:
    steps: list[Step]
    seen: list[list[dict[str, Any]]] = field(default_factory=list)
    token_ids: bool = False
    sent_ids: list[tuple[list[int], list[int]]] = field(default_factory=list)  # (prompt, completion) per call
    seeds: list[int | None] = field(default_factory=list)  # the sampling seed each call was sent


_ROLE_IDS = {"system": 1, "user": 2, "assistant": 3, "tool": 4}
_END = 5


def _body_ids(m: dict[str, Any]) -> list[int]:
    body = {k: m.get(k) for k in ("content", "tool_calls", "tool_call_id") if m.get(k) is not None}
    return [1000 + b for b in json.dumps(body, sort_keys=True).encode()] + [_END]


def fake_prompt_ids(messages: list[dict[str, Any]]) -> list[int]:
    """A deterministic stand-in for a chat template: role id + JSON bytes + end per message, then the
    generation prompt (the assistant role id)."""
    ids: list[int] = []
    for m in messages:
        ids += [_ROLE_IDS.get(m.get("role", ""), 6), *_body_ids(m)]
    return ids + [_ROLE_IDS["assistant"]]


_SCRIPTS: dict[str, Script] = {}  # test-only registry, keyed by a fresh uuid per script


class ScriptedLLM(CustomLLM):
    async def acompletion(self, model: str, messages: list, *args: Any, **kwargs: Any) -> litellm.ModelResponse:
        script = _SCRIPTS[model.split("/", 1)[-1]]
        i = len(script.seen)
        script.seen.append(json.loads(json.dumps(messages)))
        script.seeds.append((kwargs.get("optional_params") or {}).get("seed"))
        step = script.steps[i] if i < len(script.steps) else Step()
        if step.sleep_s:
            await asyncio.sleep(step.sleep_s)
        if step.calls:
            message: dict[str, Any] = {"role": "assistant", "content": step.content, "tool_calls": [
                {"id": f"s{i}_{j}", "type": "function",
                 "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)}}
                for j, (name, args) in enumerate(step.calls)]}
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": step.text}, "stop"
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": step.finish or finish}
        extra: dict[str, Any] = {}
        if script.token_ids:
            prompt, completion = fake_prompt_ids(messages), _body_ids(message)
            script.sent_ids.append((prompt, completion))
            choice["token_ids"], extra["prompt_token_ids"] = completion, prompt
        return litellm.ModelResponse(model=model, choices=[choice], **extra,
                                     usage={"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110})


def _register() -> None:
    register_own_providers()
    if not any(p.get("provider") == "scripted" for p in litellm.custom_provider_map or []):
        litellm.custom_provider_map = [*litellm.custom_provider_map, {"provider": "scripted", "custom_handler": ScriptedLLM()}]
        litellm.utils.custom_llm_setup()


def scripted(steps: list[Step], token_ids: bool = False, **role_options: Any) -> tuple[ModelRole, Script]:
    _register()
    role_options.setdefault("input_cost_per_token", 1e-12)  # a known price: the client then skips LiteLLM's price map
    key = uuid.uuid4().hex
    _SCRIPTS[key] = Script(steps=steps, token_ids=token_ids)
    return ModelRole(model=f"scripted/{key}", retries=0, **role_options), _SCRIPTS[key]


class CounterEnv(Environment):
    """A tiny deterministic environment: a running total; solved when total == payload['target']."""

    def _setup(self) -> None:
        self.total = 0
        self.calls: list[tuple[str, Any]] = []  # every call that reached the environment

    def verify(self) -> Verdict:
        return Verdict.from_checks({"total": self.total == self.instance.payload["target"],
                                    "answered": self.final_answer is not None})

    @tool
    def add(self, n: int) -> str:
        """Add n to the total.

        Args:
            n: the amount to add.
        """
        self.calls.append(("add", n))
        self.total += n
        return f"total is now {self.total}"

    @tool
    def get_total(self) -> str:
        """Read the total."""
        self.calls.append(("get_total", None))
        return str(self.total)

    @tool
    def fail(self) -> str:
        """A tool that always fails."""
        self.calls.append(("fail", None))
        raise ToolError("this tool always fails")

    @tool
    def dump(self, size: int) -> str:
        """Return a long text: HEAD, size filler characters, TAIL.

        Args:
            size: number of filler characters.
        """
        self.calls.append(("dump", size))
        return "HEAD-" + "x" * size + "-TAIL"


def counter_env(target: int = 5) -> CounterEnv:
    inst = TaskInstance(id="counter/0", family="counter", index=0, split="train", instruction=f"Make the total {target}.",
                        difficulty="easy", seed=0, payload={"target": target})
    return CounterEnv(inst)
