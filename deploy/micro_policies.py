"""Show-your-work demonstration policies as models: `showwork/<family>` plays a policy that writes only values
derivable from what the trajectory shows (tasks/<family>/show_work.py), through the real rollout runtime.

`ShowWorkClient` is a `ModelClient` whose completion is the policy's next action, computed on its own replica
of the episode's environment (the assistant's tool calls so far are executed on it: tools are deterministic,
so it reaches the rollout's state, as the `oracle/<family>` provider does). One client per episode.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import tasks
from agents.client import ModelClient, ModelResponse
from agents.oracle_provider import tool_calls_in
from agents.records import ModelRole, parse_tool_calls
from tasks.records import FinalAnswer, Step, TaskInstance, ToolCall

Policy = Callable[[Any, list[Step]], ToolCall | FinalAnswer]


def _policies() -> dict[str, Policy]:
    from tasks.anomaly_detection import show_work as anomaly
    from tasks.code_refactor import show_work as refactor

    return {"anomaly_detection": anomaly.next_action, "code_refactor": refactor.next_action}


def has_policy(instance: TaskInstance) -> bool:
    """Whether a show-your-work policy demonstrates this instance (else `flawed/<family>@native` does)."""
    from tasks.code_refactor import show_work as refactor

    if instance.family == "code_refactor":
        return refactor.applies(instance)
    return instance.family in _policies()


class ShowWorkClient(ModelClient):
    def __init__(self, family: str) -> None:
        super().__init__(ModelRole(model=f"showwork/{family}"))
        self.family = family
        self.policy = _policies()[family]
        self.env: Any = None
        self.history: list[Step] = []

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, *,
                       context: Mapping[str, Any] | None = None, **_: Any) -> ModelResponse:
        if self.env is None:
            fam = tasks.get(self.family)
            self.env = fam.make_env(tasks.instance(str((context or {})["instance_id"])))
            self.env.reset()
        for call in tool_calls_in(messages)[len(self.history):]:
            self.history.append(Step(call=call, result=await self.env.call(call.name, call.arguments)))
        action = self.policy(self.env, self.history)
        if isinstance(action, FinalAnswer):
            self.close()
            message: dict[str, Any] = {"role": "assistant", "content": action.text}
            return ModelResponse(message=message, finish_reason="stop")
        raw = [{"id": f"call_{len(self.history)}", "type": "function",
                "function": {"name": action.name, "arguments": action.arguments_json()}}]
        message = {"role": "assistant", "content": None, "tool_calls": raw}
        return ModelResponse(message=message, tool_calls=parse_tool_calls(raw), finish_reason="tool_calls")

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None
