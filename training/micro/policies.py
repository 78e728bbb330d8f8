"""Show-your-work demonstration policies as models: `showwork/<family>` plays a policy that writes only values
derivable from what the trajectory shows (tasks/<family>/show_work.py), through the real rollout runtime.

`ShowWorkClient` is a `ModelClient` whose completion is the policy's next action, computed on its own replica
of the episode's environment (the assistant's tool calls so far are executed on it: tools are deterministic,
so it reaches the rollout's state, as the `oracle/<family>` provider does). One client per episode.

The policies read their harness the way the `flawed` student does (agents/flawed/knowledge.py): a knowledge item
the system prompt states (the card's text) is always applied; an item it does not state is missed with the
probability in `MISS` (drawn once per episode from a generator seeded by the instance id and the first turn's
seed, so a demonstration is reproducible). That is what pairs harness text with behaviour in M0's
demonstrations: under h0 the rename often misses the tests directory, under a harness that states
`update_every_reference` it never does.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Mapping
from typing import Any

import tasks
from agents.client import ModelClient, ModelResponse
from agents.providers.oracle import tool_calls_in
from agents.records import ModelRole, parse_tool_calls
from agents.seeds import episode_draw
from tasks.records import FinalAnswer, Step, TaskInstance, ToolCall

Policy = Callable[[Any, list[Step], frozenset[str]], ToolCall | FinalAnswer]

# family -> knowledge key -> probability that the policy does NOT apply the item when the harness does not state
# it (stated items are always applied). Documented in docs/students.md.
MISS: dict[str, dict[str, float]] = {
    "code_refactor": {"update_every_reference": 0.8, "run_tests_before_finishing": 0.75},
    "anomaly_detection": {"bounds_are_normal": 0.8},
    "payroll_audit": {"break_deduction_over_six_hours": 0.8},
}


def knows(family: str, system_prompt: str, rng: random.Random) -> frozenset[str]:
    """The knowledge items an episode applies: every stated one, each unstated one unless its miss draw hits."""
    from agents.flawed.knowledge import stated_keys

    return applied(stated_keys(family, system_prompt), MISS.get(family, {}), rng)


def applied(stated: frozenset[str] | set[str], miss: Mapping[str, float], rng: random.Random) -> frozenset[str]:
    """The items of `miss` an episode applies: every stated one, each unstated one unless its miss draw hits
    (one draw per item, in key order, so the same generator gives the same set)."""
    return frozenset(k for k, p in sorted(miss.items()) if k in stated or rng.random() >= p)


def action_message(action: ToolCall | FinalAnswer, n_calls: int) -> dict[str, Any]:
    """The assistant message (OpenAI format) that plays `action`, the `n_calls`-th call of the episode."""
    if isinstance(action, FinalAnswer):
        return {"role": "assistant", "content": action.text}
    raw = [{"id": f"call_{n_calls}", "type": "function",
            "function": {"name": action.name, "arguments": action.arguments_json()}}]
    return {"role": "assistant", "content": None, "tool_calls": raw}


def _modules() -> dict[str, Any]:
    """family -> its show-your-work module (`applies(instance)`, `next_action(env, history, knows)`)."""
    from tasks import show_work

    return {f: show_work.module(f) for f in show_work.SHOW_WORK_TABLE}


def policy(family: str, options: Mapping[str, Any] | None = None) -> Policy:
    """The family's show-your-work `next_action` with its options bound."""
    return functools.partial(_modules()[family].next_action, **(options or {}))


def has_policy(instance: TaskInstance, program: str = "") -> bool:
    """Whether a show-your-work policy demonstrates this instance under `program` (the family's default when
    empty; else `flawed/<family>@native` does)."""
    from tasks import show_work

    return show_work.covers(instance, program)


def _draw_key(context: Mapping[str, Any] | None, seed: int | None) -> int | None:
    """episode seed x 1000 + turn from a seeded rollout's context (the request seed this was before the rollout
    hashed the instance into it: committed builds keep their demonstrations), else the request's seed."""
    context = context or {}
    if "episode_seed" in context:
        return episode_draw(int(context["episode_seed"]), int(context["turn"]))
    return seed


class ShowWorkClient(ModelClient):
    def __init__(self, family: str, options: Mapping[str, Any] | None = None,
                 knows: frozenset[str] | None = None) -> None:
        """`options`: keyword arguments of the family's `next_action` (e.g. anomaly_detection's `program`);
        `knows`: the items to apply (default: read from the system prompt's card texts, see `knows()`)."""
        super().__init__(ModelRole(model=f"showwork/{family}"))
        self.family = family
        self.policy: Policy = policy(family, options)
        self.env: Any = None
        self.history: list[Step] = []
        self.knows: frozenset[str] | None = knows

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, *,
                       context: Mapping[str, Any] | None = None, **kwargs: Any) -> ModelResponse:
        if self.env is None:
            fam = tasks.get(self.family)
            self.env = fam.make_env(tasks.instance(str((context or {})["instance_id"])))
            self.env.reset()
        if self.knows is None:
            system = next((str(m.get("content") or "") for m in messages if m.get("role") == "system"), "")
            rng = random.Random(f"{(context or {}).get('instance_id')}:{_draw_key(context, kwargs.get('seed'))}")
            self.knows = knows(self.family, system, rng)
        for call in tool_calls_in(messages)[len(self.history):]:
            self.history.append(Step(call=call, result=await self.env.call(call.name, call.arguments)))
        action = self.policy(self.env, self.history, self.knows)
        message = action_message(action, len(self.history))
        if isinstance(action, FinalAnswer):
            self.close()
            return ModelResponse(message=message, finish_reason="stop")
        return ModelResponse(message=message, tool_calls=parse_tool_calls(message["tool_calls"]),
                             finish_reason="tool_calls")

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None
