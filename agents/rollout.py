"""The rollout runtime: one model inside one harness on one environment -> a `Trajectory`.

    traj = await run_episode(ModelRole(model="hosted_vllm/tiny", api_base=url), baseline("stock_alert"), env, seed=0)

Contract (what callers rely on):
- The caller creates and closes `env`. `run_episode` calls `env.reset()`, or with `prefix` (OpenAI messages
  of an earlier episode up to some turn) rebuilds the state with `env.replay(...)` of the prefix's executed
  tool calls and continues the conversation; tool calls at the end of the prefix that have no tool answer
  yet (e.g. an expert-rewritten turn) are executed first, through the harness like any other call.
- The model finishes by answering with no tool call: that text goes to `env.submit(FinalAnswer(...))`.
- It never raises for this episode's failure (only cancellation propagates): a model error, timeout or any
  exception ends the episode with a stop reason and `error` text, and the verdict is still `env.verify()`
  (score 0 with a `verify_crashed` check if verify itself raises).
- Malformed tool calls (arguments not a JSON object, a tool the model was not shown) are answered with an
  error tool message and counted per turn; they end nothing unless a hook says so.
- `messages` is the full conversation as the model saw it turn by turn (tool results after the harness's
  truncation); `TurnRecord.tool_results` keep what the environment (or helper tool) actually returned.
  Turns of a prefix are recorded too (without tokens or latency), so `turns[i]` is assistant message i.

Stop reasons: submitted | max_turns | timeout | cost_cap | context_overflow | model_error | error. A hook's
`stop` action ends the run with stop reason `error` and `error = "stopped by hook '<id>': ..."` (the
StopReason set is a shared contract; a hook stop is the harness aborting the episode).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agents.client import ModelCallError, ModelClient, parse_tool_calls
from agents.records import InjectedFault, ModelRole, ToolChoice, Trajectory, TriggerRecord, TurnRecord
from harness.context import content_chars, split_for_window, summary_request, truncate, turn_starts, windowed
from harness.helpers import HelperState
from harness.hooks import AfterToolError, AtTurn, BeforeToolCall, ContextSize, Hook, OnFinish, RepeatedCall, matches_call, tool_matches
from harness.program import Harness
from harness.render import Rendered, render
from tasks.base import Environment
from tasks.records import FinalAnswer, ToolCall, ToolResult, Verdict

log = logging.getLogger(__name__)

BLOCKED_PREFIX = "[harness] call blocked: "
NOT_RUN = "[harness] not executed: the episode stopped before this call ran."
HOOK_PREFIX = "[harness] "


class Limits(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    max_turns: int = Field(default=30, ge=1, description="Assistant turns (model calls) per episode, prefix included.")
    wall_s: float = Field(default=600.0, gt=0, description="Wall-clock seconds for the whole episode.")
    cost_usd: float = Field(default=20.0, ge=0, description="Stop once the episode's model cost reaches this.")
    max_tokens_per_turn: int = Field(default=512, ge=1, description="Max generated tokens per model call.")


class _Stop(Exception):
    """Internal: ends the loop with a stop reason."""

    def __init__(self, reason: str, error: str = "") -> None:
        super().__init__(error or reason)
        self.reason = reason
        self.error = error


class _Episode:
    """Mutable state of one run (kept outside the loop so a timeout still leaves a full record)."""

    def __init__(self, client: ModelClient, harness: Harness, env: Environment, rendered: Rendered, seed: int,
                 limits: Limits, tool_choice: ToolChoice | None, summarizers: Mapping[str, ModelRole | ModelClient],
                 seed_requests: bool) -> None:
        self.client, self.h, self.env, self.r, self.limits = client, harness, env, rendered, limits
        self.seed = seed if seed_requests else None
        self.tool_choice = tool_choice
        self.summarizers = summarizers
        self.tools_openai = rendered.openai_tools()
        self.messages: list[dict[str, Any]] = []
        self.turns: list[TurnRecord] = []
        self.cost = 0.0
        self.fires: Counter[str] = Counter()
        self.call_counts: Counter[tuple[str, str]] = Counter()
        self.succeeded: set[str] = set()  # tool names that ran without error
        self.helpers = HelperState()
        self.summary: str | None = None
        self.summarized_turns = 0
        self.pending_cost = 0.0  # summarizer cost, charged to the next turn
        self.pending_triggers: list[TriggerRecord] = []  # fired before a model call, belong to that turn
        self.injected: list[InjectedFault] = []  # simulated students' ground truth, per turn

    # --- hooks ----------------------------------------------------------------------------------

    def _turn_seed(self, turn: int) -> int | None:
        """A seed per turn, derived from the episode seed: reproducible, yet turns do not all replay one draw."""
        return None if self.seed is None else self.seed * 1_000 + turn
    def _can_fire(self, hook: Hook) -> bool:
        return hook.max_fires is None or self.fires[hook.id] < hook.max_fires

    def _fire(self, hook: Hook, turn: int, triggers: list[TriggerRecord], detail: str = "") -> None:
        self.fires[hook.id] += 1
        triggers.append(TriggerRecord(component_id=f"hook:{hook.id}", turn=turn, kind="hook",
                                      detail=f"{hook.when.on}->{hook.then.do}" + (f": {detail}" if detail else "")))

    def _hooks(self, *kinds: type) -> list[Hook]:
        return [h for h in self.h.hooks if isinstance(h.when, kinds) and self._can_fire(h)]

    # --- the loop -------------------------------------------------------------------------------
    async def start(self, prefix: list[dict[str, Any]] | None) -> None:
        if prefix is None:
            instruction = self.env.reset()
            self.messages = [{"role": "system", "content": self.r.system_prompt}, {"role": "user", "content": instruction}]
            return
        await self._load_prefix(prefix)

    async def loop(self) -> str:
        while True:
            turn = len(self.turns)
            if turn >= self.limits.max_turns:
                raise _Stop("max_turns")
            if self.cost >= self.limits.cost_usd:
                raise _Stop("cost_cap", f"cost ${self.cost:.4f} reached the cap ${self.limits.cost_usd:.4f}")
            triggers, self.pending_triggers = self.pending_triggers, []
            self._before_call_hooks(turn, triggers)
            view = await self._view(turn, triggers)
            try:
                resp = await self.client.complete(view, self.tools_openai or None, tool_choice=self.tool_choice,
                                                  seed=self._turn_seed(turn), max_tokens=self.limits.max_tokens_per_turn,
                                                  context={"instance_id": self.env.instance.id})
            except ModelCallError as e:
                self.pending_triggers = triggers
                raise _Stop(e.kind, str(e)) from None
            cost = resp.cost_usd + self.pending_cost
            self.pending_cost = 0.0
            self.cost += cost
            rec = TurnRecord(index=turn, assistant=resp.message, tool_calls=resp.tool_calls, triggers=triggers,
                             latency_s=resp.latency_s, prompt_tokens=resp.prompt_tokens,
                             completion_tokens=resp.completion_tokens, cost_usd=cost,
                             prompt_token_ids=resp.prompt_token_ids, completion_token_ids=resp.completion_token_ids)
            self.turns.append(rec)
            self.injected.extend(f.model_copy(update={"turn": turn}) for f in resp.injected_faults)
            self.messages.append(resp.message)
            if resp.tool_calls:
                await self._run_calls(rec, resp.tool_calls)
            elif await self._finish(rec, resp.content):
                return "submitted"

    def _before_call_hooks(self, turn: int, triggers: list[TriggerRecord]) -> None:
        size = content_chars(self.messages)
        for hook in self._hooks(AtTurn, ContextSize):
            w = hook.when
            if isinstance(w, AtTurn) and w.turn != turn:
                continue
            if isinstance(w, ContextSize) and (size <= w.chars or self.fires[hook.id] > 0):
                continue  # context_size fires once, on the first crossing
            self._fire(hook, turn, triggers, f"{size} chars" if isinstance(w, ContextSize) else "")
            if hook.then.do == "stop":
                self.pending_triggers = triggers
                raise _Stop("error", f"stopped by hook '{hook.id}': {hook.then.message}".rstrip(": "))
            self.messages.append({"role": "user", "content": HOOK_PREFIX + hook.then.message})

    async def _finish(self, rec: TurnRecord, text: str) -> bool:
        """Apply on_finish hooks; True if the episode is submitted, False if the finish was refused."""
        refusals: list[str] = []
        for hook in self._hooks(OnFinish):
            a = hook.then
            if a.do == "require":
                if any(tool_matches(a.tool, t) for t in self.succeeded):
                    continue
                self._fire(hook, rec.index, rec.triggers, f"missing {a.tool}")
                refusals.append(a.message or f"Before finishing you must call the tool matching '{a.tool}' successfully.")
            elif a.do == "inject":
                self._fire(hook, rec.index, rec.triggers)
                refusals.append(a.message)
            elif a.do == "stop":
                self._fire(hook, rec.index, rec.triggers)
                raise _Stop("error", f"stopped by hook '{hook.id}': {a.message}".rstrip(": "))
        if refusals:
            self.messages.extend({"role": "user", "content": HOOK_PREFIX + m} for m in refusals)
            return False
        await self.env.submit(FinalAnswer(text=text))
        return True

    async def _run_calls(self, rec: TurnRecord, calls: list[ToolCall]) -> None:
        injections: list[str] = []
        stop: _Stop | None = None
        for call in calls:
            if stop is not None:
                result = ToolResult(content=NOT_RUN, is_error=True)
            else:
                result, stop = await self._one_call(rec, call, injections)
            shown = result.content
            if not shown.startswith((NOT_RUN, BLOCKED_PREFIX)):
                shown, cut = truncate(shown, self.h.context.max_tool_result_chars, self.h.context.head_fraction)
                if cut:
                    rec.triggers.append(TriggerRecord(component_id="context", turn=rec.index, kind="context_truncate",
                                                      detail=f"{call.name}: cut {cut} of {len(result.content)} chars"))
            rec.tool_results.append(result)
            self.messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": shown})
        self.messages.extend({"role": "user", "content": HOOK_PREFIX + m} for m in injections)
        if stop is not None:
            raise stop

    async def _one_call(self, rec: TurnRecord, call: ToolCall, injections: list[str]) -> tuple[ToolResult, _Stop | None]:
        args_json = call.arguments_json()
        key = (call.name, args_json)
        self.call_counts[key] += 1
        for hook in self._hooks(BeforeToolCall, RepeatedCall):
            w = hook.when
            if not matches_call(w, call.name, args_json):
                continue
            if isinstance(w, RepeatedCall) and self.call_counts[key] < w.n:
                continue
            self._fire(hook, rec.index, rec.triggers, call.name)
            a = hook.then
            if a.do == "inject":
                injections.append(a.message)
            elif a.do == "block":
                return ToolResult(content=BLOCKED_PREFIX + a.message, is_error=True), None
            elif a.do == "stop":
                msg = f"stopped by hook '{hook.id}': {a.message}".rstrip(": ")
                return ToolResult(content=NOT_RUN, is_error=True), _Stop("error", msg)
        result = await self._execute(rec, call)
        if result.is_error:
            for hook in self._hooks(AfterToolError):
                if not matches_call(hook.when, call.name, args_json):
                    continue
                self._fire(hook, rec.index, rec.triggers, call.name)
                if hook.then.do == "stop":
                    return result, _Stop("error", f"stopped by hook '{hook.id}': {hook.then.message}".rstrip(": "))
                injections.append(hook.then.message)
        return result, None

    async def _execute(self, rec: TurnRecord, call: ToolCall) -> ToolResult:
        known = self.r.env_tools + self.r.helper_tools
        if call.name not in known:
            rec.malformed_tool_calls += 1
            return ToolResult(content=f"Error: unknown tool '{call.name}'; available tools: {', '.join(known)}", is_error=True)
        if isinstance(call.arguments, str):
            rec.malformed_tool_calls += 1
            return ToolResult(content=f"Error: arguments must be a JSON object, got {call.arguments[:200]!r}", is_error=True)
        if call.name in self.r.helper_tools:
            rec.triggers.append(TriggerRecord(component_id=f"tool:{call.name}", turn=rec.index, kind="helper_tool"))
            result = self.helpers.call(call.name, call.arguments)
        else:
            result = await self.env.call(call.name, call.arguments)
        if not result.is_error:
            self.succeeded.add(call.name)
        return result

    # --- context --------------------------------------------------------------------------------
    async def _view(self, turn: int, triggers: list[TriggerRecord]) -> list[dict[str, Any]]:
        policy = self.h.context
        if policy.keep_last_turns is None:
            return self.messages
        _, older, _ = split_for_window(self.messages, policy.keep_last_turns)
        n_older = len(turn_starts(older))
        if n_older == 0:
            return self.messages
        if policy.summarize_with and n_older > self.summarized_turns:
            await self._summarize(turn, older, n_older, triggers)
        view, dropped = windowed(self.messages, policy, self.summary)
        triggers.append(TriggerRecord(component_id="context", turn=turn, kind="context_window",
                                      detail=f"{dropped} older turn(s) {'summarized' if self.summary else 'omitted'}"))
        return view

    async def _summarize(self, turn: int, older: list[dict[str, Any]], n_older: int, triggers: list[TriggerRecord]) -> None:
        name = self.h.context.summarize_with or ""
        if name == "self":
            client: ModelClient | None = self.client
        else:
            role = self.summarizers.get(name)
            client = role if isinstance(role, ModelClient) else ModelClient(role) if role is not None else None
        if client is None:
            triggers.append(TriggerRecord(component_id="context", turn=turn, kind="context_summarize",
                                          detail=f"no summarizer role '{name}' given; older turns omitted"))
            return
        starts = turn_starts(older)
        new_part = older[starts[self.summarized_turns]:]
        try:
            resp = await client.complete(summary_request(new_part, self.summary), seed=self._turn_seed(turn),
                                         max_tokens=self.limits.max_tokens_per_turn)
        except ModelCallError as e:
            log.warning("summarizer %s failed: %s; older turns omitted", name, e)
            triggers.append(TriggerRecord(component_id="context", turn=turn, kind="context_summarize",
                                          detail=f"summarizer failed ({e.kind}); older turns omitted"))
            return
        self.summary = resp.content.strip() or self.summary
        self.summarized_turns = n_older
        self.pending_cost += resp.cost_usd
        triggers.append(TriggerRecord(component_id="context", turn=turn, kind="context_summarize",
                                      detail=f"{n_older} turn(s) folded by '{name}'"))

    # --- prefix continuation --------------------------------------------------------------------
    async def _load_prefix(self, prefix: list[dict[str, Any]]) -> None:
        msgs = json.loads(json.dumps(prefix))  # deep copy; the caller's list is never changed
        if not msgs or msgs[0].get("role") != "system":
            msgs.insert(0, {"role": "system", "content": self.r.system_prompt})
        answers = {m.get("tool_call_id"): str(m.get("content") or "") for m in msgs if m.get("role") == "tool"}
        replay: list[ToolCall] = []
        for m in msgs:
            if m.get("role") != "assistant":
                continue
            for c in parse_tool_calls(m.get("tool_calls")):
                if c.id not in answers:
                    continue
                self.call_counts[(c.name, c.arguments_json())] += 1
                blocked = answers[c.id].startswith((BLOCKED_PREFIX, NOT_RUN))
                if blocked or isinstance(c.arguments, str):
                    continue
                if c.name in self.r.helper_tools:
                    if not self.helpers.call(c.name, c.arguments).is_error:
                        self.succeeded.add(c.name)
                elif c.name in self.r.env_tools:
                    replay.append(c)
        steps = await self.env.replay(replay)
        self.succeeded.update(s.call.name for s in steps if not s.result.is_error)
        # records for the prefix's turns (no tokens or latency: they were produced elsewhere)
        self.messages = []
        pending: list[ToolCall] = []
        for m in msgs:
            self.messages.append(m)
            if m.get("role") != "assistant":
                continue
            calls = parse_tool_calls(m.get("tool_calls"))
            results = [ToolResult(content=answers[c.id], is_error=answers[c.id].startswith(("Error", "[harness]")))
                       for c in calls if c.id in answers]
            self.turns.append(TurnRecord(index=len(self.turns), assistant=m, tool_calls=calls, tool_results=results))
            pending = [c for c in calls if c.id not in answers]
        last = msgs[-1]
        if last.get("role") == "assistant":
            rec = self.turns[-1]
            if pending:  # e.g. an expert-rewritten turn whose call has not run yet
                await self._run_calls(rec, pending)
            elif not rec.tool_calls and await self._finish(rec, str(last.get("content") or "")):
                raise _Stop("submitted")


def _dangling_fix(messages: list[dict[str, Any]]) -> None:
    """Answer tool calls left without a tool message (a timeout mid-turn) so the conversation stays valid."""
    answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.get("role") == "assistant":
            for tc in m.get("tool_calls") or []:
                if tc.get("id") not in answered:
                    messages.append({"role": "tool", "tool_call_id": tc.get("id"),
                                     "name": (tc.get("function") or {}).get("name"), "content": NOT_RUN})
            return


def _verify(env: Environment) -> Verdict:
    try:
        return env.verify()
    except Exception as e:  # the verifier's bug must not lose the trajectory
        log.warning("verify raised %s: %s", type(e).__name__, e)
        return Verdict(score=0.0, failed_checks=["verify_crashed"], feedback=f"verify raised {type(e).__name__}: {e}")


async def run_episode(
    model: ModelRole | ModelClient,
    harness: Harness,
    env: Environment,
    seed: int,
    limits: Limits = Limits(),
    *,
    prefix: list[dict[str, Any]] | None = None,
    tag: str = "rollout",
    tool_choice: ToolChoice | None = None,
    summarizers: Mapping[str, ModelRole | ModelClient] | None = None,
    seed_requests: bool = True,
) -> Trajectory:
    """Run one episode; see the module docstring for the contract. Never raises for the episode's failure.

    `summarizers` resolves the context policy's `summarize_with` role names. `seed_requests` sends `seed` with
    every model call (reproducible sampling). vLLM's CPU build kills its engine ("CPU Generator does not use
    offset") when a seeded request is prefilled in chunks; `deploy.vllm_server.ServeSpec` turns chunked prefill
    off on CPU for that reason. Set it False for a server started some other way.
    """
    t0 = time.perf_counter()
    client = model if isinstance(model, ModelClient) else ModelClient(model)
    stop_reason, error = "error", ""
    ep: _Episode | None = None
    tools: list[dict[str, Any]] = []
    try:
        rendered = render(harness, env.tools())
        tools = rendered.openai_tools()
        ep = _Episode(client, harness, env, rendered, seed, limits, tool_choice, summarizers or {}, seed_requests)

        async def body() -> str:
            assert ep is not None
            await ep.start(prefix)
            return await ep.loop()

        stop_reason = await asyncio.wait_for(body(), timeout=limits.wall_s)
    except _Stop as s:
        stop_reason, error = s.reason, s.error
    except (asyncio.TimeoutError, TimeoutError):
        stop_reason, error = "timeout", f"episode passed its wall-clock limit of {limits.wall_s}s"
    except Exception as e:  # an episode's own failure is recorded, never raised (error policy)
        log.warning("episode on %s failed: %s: %s", env.instance.id, type(e).__name__, e)
        stop_reason, error = "error", f"{type(e).__name__}: {e}"
    messages = ep.messages if ep else []
    turns = ep.turns if ep else []
    if ep is not None and ep.pending_triggers and turns:
        turns[-1].triggers.extend(ep.pending_triggers)  # hooks fired before a call that never returned
    _dangling_fix(messages)
    return Trajectory(
        instance=env.instance, harness_id=harness.id, model_id=client.role.id, seed=seed, messages=messages,
        tools=tools, turns=turns, stop_reason=stop_reason, verdict=_verify(env), error=error,
        wall_s=time.perf_counter() - t0, tag=tag, injected_faults=ep.injected if ep else [],
    ).with_id()


__all__ = ["BLOCKED_PREFIX", "HOOK_PREFIX", "NOT_RUN", "Limits", "run_episode"]
