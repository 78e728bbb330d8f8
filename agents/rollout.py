"""The rollout runtime: one model inside one harness on one environment -> a `Trajectory`.

    traj = await run_episode(ModelRole(model="hosted_vllm/tiny", api_base=url), baseline("stock_alert"), env, seed=0)

Contract (what callers rely on):
- The caller creates and closes `env`. `run_episode` calls `env.reset()`, or with `prefix` rebuilds and
  verifies the state the prefix reached (agents/prefix.py) and continues the conversation; tool calls at the
  end of the prefix that have no answer yet (e.g. an expert-rewritten turn) run first, through the harness.
- The model finishes by answering with no tool call: that text goes to `env.submit(FinalAnswer(...))`. A
  reply cut by the token limit (`finish_reason == "length"`) without a tool call is not an answer: the
  episode ends `truncated`. A cut reply with tool calls runs them (the provider returns only calls it
  parsed whole; a call whose arguments were cut is malformed and answered with an error) and goes on.
- It never raises for this episode's failure (only cancellation propagates, and `ReplayDivergence` when the
  caller asks for it with `on_divergence="raise"`): a model error, timeout or any exception ends the
  episode with a stop reason and `error` text, and the verdict is still `env.verify()` (score 0 with a
  `verify_crashed` check if verify itself raises).
- Malformed tool calls (arguments not a JSON object, nested deeper than `agents.tool_args.MAX_ARGS_DEPTH`, a
  tool the model was not shown) are answered with an error tool message and counted per turn; they end
  nothing unless a hook says so. Calls past `Limits.max_tool_calls_per_turn` in one reply are not run: each
  is answered with one message naming the cap (`over_cap_message`), and the episode goes on.
- The environment is shared with our own in-process providers while the episode runs
  (agents/shared_env.py): `oracle/<family>` reads its state there instead of replaying the calls on a copy.
- Composite tools of the harness (harness/composite.py): a call is recorded as the model made it, with a
  `tool:<name>` trigger (kind `composite_tool`); its environment calls run in order and their results are
  joined into the one tool message (agents/composite_call.py); a call that does not expand is an error
  message for the model. Hooks see the composite call (its name), not the calls it expands into.
- Hooks: `harness.hooks.decide` says what fires and what to do; this module only performs the decisions.
  A hook's `stop` ends the episode with stop reason `harness_stop`.
- `messages` is the full conversation as the model saw it turn by turn (tool results after the harness's
  truncation); `TurnRecord.tool_results` keep what the environment (or helper tool) actually returned.
  Each turn records the context cut of its view (`Trajectory.model_messages(i)` rebuilds it exactly) and
  its prompt ids by delta (`Trajectory.token_ids()`).

The stop reasons and their meanings: `agents.records.STOP_REASON_MEANINGS` (and docs/rollout.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping
from typing import Any, Literal

from agents import shared_env
from agents.client import ModelCallError, ModelClient, ModelResponse
from agents.composite_call import call_composite
from agents.episode import EpisodeState
from agents.jobs import Limits
from agents.prefix import Prefix, ReplayDivergence, restore_prefix
from agents.records import ModelRole, ToolChoice, Trajectory, TriggerRecord, TurnRecord
from agents.seeds import turn_seed
from agents.token_ids import encode_prompt, next_base
from agents.tool_args import OVER_CAP_PREFIX, over_cap_message
from agents.tool_args import problem as arguments_problem
from harness.context import (
    ContextCut, apply_cut, content_chars, split_for_window, summary_request, truncate, turn_starts, window_cut,
)
from harness.hooks import (
    BLOCKED_PREFIX, HOOK_PREFIX, NOT_RUN, Decision, Event, FinishEvent, ModelCallEvent, ToolCallEvent, ToolErrorEvent,
    decide,
)
from harness.program import Harness
from harness.render import Rendered, render
from tasks.base import Environment
from tasks.records import FinalAnswer, ToolCall, ToolResult, Verdict

log = logging.getLogger(__name__)


class _Stop(Exception):
    """Internal: ends the loop with a stop reason."""

    def __init__(self, reason: str, error: str = "") -> None:
        super().__init__(error or reason)
        self.reason = reason
        self.error = error


class _Runner:
    """Performs one episode: the loop, the hooks' decisions, tool calls and the context view."""

    def __init__(self, client: ModelClient, harness: Harness, env: Environment, rendered: Rendered, seed: int,
                 limits: Limits, tool_choice: ToolChoice | None, summarizers: Mapping[str, ModelRole | ModelClient],
                 seed_requests: bool) -> None:
        self.client, self.h, self.env, self.r, self.limits = client, harness, env, rendered, limits
        self.seed = seed if seed_requests else None
        self.tool_choice = tool_choice
        self.summarizers = summarizers
        self.tools_openai = rendered.openai_tools() or None
        self.s = EpisodeState()
        self.env_key = ""  # set by run_episode while the environment is shared (agents/shared_env.py)

    def _turn_seed(self, turn: int) -> int | None:
        return None if self.seed is None else turn_seed(self.env.instance.id, self.seed, turn)

    def _context(self, turn: int) -> dict[str, Any]:
        """What our own providers get beside the request: the instance, the shared environment and, when the
        requests are seeded, the episode seed and the turn (the simulated student's draws and state key)."""
        context: dict[str, Any] = {"instance_id": self.env.instance.id, "env_key": self.env_key}
        if self.seed is not None:
            context |= {"episode_seed": self.seed, "turn": turn}
        return context

    def _decide(self, event: Event) -> list[Decision]:
        return decide(self.h.hooks, event, self.s.hook_state()) if self.h.hooks else []

    def _fire(self, d: Decision, turn: int, triggers: list[TriggerRecord]) -> None:
        self.s.fires[d.hook_id] += 1
        triggers.append(TriggerRecord(component_id=f"hook:{d.hook_id}", turn=turn, kind="hook", detail=d.detail))

    # --- the loop -------------------------------------------------------------------------------
    async def start(self, prefix: Prefix | list[dict[str, Any]] | None) -> None:
        if prefix is None:
            instruction = self.env.reset()
            self.s.messages = [{"role": "system", "content": self.r.system_prompt}, {"role": "user", "content": instruction}]
            return
        pending = await restore_prefix(self.s, self.env, self.r, self.h.context, prefix,
                                       {t.name: t for t in self.h.composite_tools})
        if not self.s.turns or self.s.messages[-1].get("role") != "assistant":
            return
        rec = self.s.turns[-1]
        if pending:  # e.g. an expert-rewritten turn whose call has not run yet
            await self._run_calls(rec, pending)
        elif not rec.tool_calls and await self._finish(rec, str(self.s.messages[-1].get("content") or "")):
            raise _Stop("submitted")

    async def loop(self) -> str:
        while True:
            turn = len(self.s.turns)
            if turn >= self.limits.max_turns:
                raise _Stop("max_turns")
            if self.s.cost >= self.limits.cost_usd:
                raise _Stop("cost_cap", f"cost ${self.s.cost:.4f} reached the cap ${self.limits.cost_usd:.4f}")
            triggers, self.s.pending_triggers = self.s.pending_triggers, []
            self._before_call(turn, triggers)
            n_context = len(self.s.messages)
            view, cut = await self._view(turn, triggers)
            resp = await self._call_model(turn, view, triggers)
            rec = self._record(turn, resp, n_context, cut, triggers)
            if resp.tool_calls:
                await self._run_calls(rec, resp.tool_calls)
            elif resp.finish_reason == "length":
                raise _Stop("truncated", f"turn {turn}: the reply was cut at {resp.completion_tokens} tokens "
                                         f"(max_tokens_per_turn={self.limits.max_tokens_per_turn}) without a tool call")
            elif await self._finish(rec, resp.content):
                return "submitted"

    async def _call_model(self, turn: int, view: list[dict[str, Any]], triggers: list[TriggerRecord]) -> ModelResponse:
        try:
            return await self.client.complete(view, self.tools_openai, tool_choice=self.tool_choice,
                                              seed=self._turn_seed(turn), max_tokens=self.limits.max_tokens_per_turn,
                                              context=self._context(turn))
        except ModelCallError as e:
            self.s.pending_triggers = triggers
            raise _Stop(e.kind, str(e)) from None

    def _record(self, turn: int, resp: ModelResponse, n_context: int, cut: ContextCut | None,
                triggers: list[TriggerRecord]) -> TurnRecord:
        cost = resp.cost_usd + self.s.pending_cost
        self.s.pending_cost = 0.0
        self.s.cost += cost
        reused, added, copy = 0, None, None
        if resp.prompt_token_ids is not None:
            reused, added, copy = encode_prompt(self.s.last_ids, resp.prompt_token_ids)
        self.s.last_ids = next_base(resp.prompt_token_ids, resp.completion_token_ids)
        rec = TurnRecord(index=turn, assistant=resp.message, tool_calls=resp.tool_calls, triggers=triggers,
                         latency_s=resp.latency_s, prompt_tokens=resp.prompt_tokens, completion_tokens=resp.completion_tokens,
                         cost_usd=cost, finish_reason=resp.finish_reason, prompt_ids_reused=reused, prompt_ids_added=added,
                         prompt_ids_copy=copy,
                         completion_token_ids=resp.completion_token_ids, logprobs=resp.logprobs,
                         context_messages=n_context, context_cut=cut)
        self.s.turns.append(rec)
        self.s.injected.extend(f.model_copy(update={"turn": turn}) for f in resp.injected_faults)
        self.s.messages.append(resp.message)
        return rec

    # --- hooks ----------------------------------------------------------------------------------
    def _before_call(self, turn: int, triggers: list[TriggerRecord]) -> None:
        if not self.h.hooks:
            return
        for d in self._decide(ModelCallEvent(turn=turn, context_chars=content_chars(self.s.messages))):
            self._fire(d, turn, triggers)
            if d.effect == "stop":
                self.s.pending_triggers = triggers
                raise _Stop("harness_stop", d.message)
            self.s.messages.append({"role": "user", "content": d.message})

    async def _finish(self, rec: TurnRecord, text: str) -> bool:
        """Apply on_finish decisions; True if the episode is submitted, False if the finish was refused."""
        refusals: list[str] = []
        for d in self._decide(FinishEvent(turn=rec.index)):
            self._fire(d, rec.index, rec.triggers)
            if d.effect == "stop":
                raise _Stop("harness_stop", d.message)
            refusals.append(d.message)
        if refusals:
            self.s.messages.extend({"role": "user", "content": m} for m in refusals)
            return False
        await self.env.submit(FinalAnswer(text=text))
        return True

    # --- tool calls -----------------------------------------------------------------------------
    async def _run_calls(self, rec: TurnRecord, calls: list[ToolCall]) -> None:
        injections: list[str] = []
        stop: _Stop | None = None
        cap = self.limits.max_tool_calls_per_turn
        for i, call in enumerate(calls):
            if i >= cap:
                result = ToolResult(content=over_cap_message(len(calls), cap), is_error=True)
            elif stop is not None:
                result = ToolResult(content=NOT_RUN, is_error=True)
            else:
                result, stop = await self._one_call(rec, call, injections)
            shown = result.content
            if not shown.startswith((NOT_RUN, BLOCKED_PREFIX, OVER_CAP_PREFIX)):
                shown, cut = truncate(shown, self.h.context.max_tool_result_chars, self.h.context.head_fraction)
                if cut:
                    rec.triggers.append(TriggerRecord(component_id="context", turn=rec.index, kind="context_truncate",
                                                      detail=f"{call.name}: cut {cut} of {len(result.content)} chars"))
            rec.tool_results.append(result)
            self.s.messages.append({"role": "tool", "tool_call_id": call.id, "name": call.name, "content": shown})
        self.s.messages.extend({"role": "user", "content": m} for m in injections)
        if stop is not None:
            raise stop

    async def _one_call(self, rec: TurnRecord, call: ToolCall, injections: list[str]) -> tuple[ToolResult, _Stop | None]:
        args_json = call.arguments_json()
        self.s.call_counts[(call.name, args_json)] += 1
        repeats = self.s.call_counts[(call.name, args_json)]
        for d in self._decide(ToolCallEvent(turn=rec.index, tool=call.name, args_json=args_json, repeats=repeats)):
            self._fire(d, rec.index, rec.triggers)
            if d.effect == "block":
                return ToolResult(content=d.message, is_error=True), None
            if d.effect == "stop":
                return ToolResult(content=NOT_RUN, is_error=True), _Stop("harness_stop", d.message)
            injections.append(d.message)
        result = await self._execute(rec, call)
        if result.is_error:
            for d in self._decide(ToolErrorEvent(turn=rec.index, tool=call.name, args_json=args_json)):
                self._fire(d, rec.index, rec.triggers)
                if d.effect == "stop":
                    return result, _Stop("harness_stop", d.message)
                injections.append(d.message)
        return result, None

    async def _execute(self, rec: TurnRecord, call: ToolCall) -> ToolResult:
        known = self.r.env_tools + self.r.helper_tools + self.r.composite_tools
        if call.name not in known:
            rec.malformed_tool_calls += 1
            return ToolResult(content=f"Error: unknown tool '{call.name}'; available tools: {', '.join(known)}", is_error=True)
        if isinstance(call.arguments, str):
            rec.malformed_tool_calls += 1
            return ToolResult(content=f"Error: {arguments_problem(call.arguments)}", is_error=True)
        if call.name in self.r.helper_tools:
            rec.triggers.append(TriggerRecord(component_id=f"tool:{call.name}", turn=rec.index, kind="helper_tool"))
            result = self.s.helpers.call(call.name, call.arguments)
        elif call.name in self.r.composite_tools:
            rec.triggers.append(TriggerRecord(component_id=f"tool:{call.name}", turn=rec.index, kind="composite_tool"))
            result, ok = await call_composite(self.env, self.h.composite(call.name), call)  # type: ignore[arg-type]
            self.s.succeeded.update(ok)
        else:
            result = await self.env.call(call.name, call.arguments)
        if not result.is_error:
            self.s.succeeded.add(call.name)
        return result

    # --- context --------------------------------------------------------------------------------
    async def _view(self, turn: int, triggers: list[TriggerRecord]) -> tuple[list[dict[str, Any]], ContextCut | None]:
        """What the model is sent this turn, and the cut the context window made (None: everything)."""
        policy = self.h.context
        if policy.keep_last_turns is None:
            return self.s.messages, None
        _, older, _ = split_for_window(self.s.messages, policy.keep_last_turns)
        n_older = len(turn_starts(older))
        if n_older == 0:
            return self.s.messages, None
        if policy.summarize_with and n_older > self.s.summarized_turns:
            await self._summarize(turn, older, n_older, triggers)
        cut = window_cut(self.s.messages, policy, self.s.summary)
        triggers.append(TriggerRecord(component_id="context", turn=turn, kind="context_window",
                                      detail=f"{n_older} older turn(s) {'summarized' if self.s.summary else 'omitted'}"))
        return apply_cut(self.s.messages, cut), cut

    def _summarizer(self) -> ModelClient | None:
        name = self.h.context.summarize_with or ""
        if name == "self":
            return self.client
        role = self.summarizers.get(name)
        return role if isinstance(role, ModelClient) else ModelClient(role) if role is not None else None

    async def _summarize(self, turn: int, older: list[dict[str, Any]], n_older: int, triggers: list[TriggerRecord]) -> None:
        name = self.h.context.summarize_with or ""
        client = self._summarizer()
        if client is None:
            triggers.append(TriggerRecord(component_id="context", turn=turn, kind="context_summarize",
                                          detail=f"no summarizer role '{name}' given; older turns omitted"))
            return
        new_part = older[turn_starts(older)[self.s.summarized_turns]:]
        try:
            resp = await client.complete(summary_request(new_part, self.s.summary), seed=self._turn_seed(turn),
                                         max_tokens=self.limits.max_tokens_per_turn)
        except ModelCallError as e:
            log.warning("summarizer %s failed: %s; older turns omitted", name, e)
            triggers.append(TriggerRecord(component_id="context", turn=turn, kind="context_summarize",
                                          detail=f"summarizer failed ({e.kind}); older turns omitted"))
            return
        self.s.summary = resp.content.strip() or self.s.summary
        self.s.summarized_turns = n_older
        self.s.pending_cost += resp.cost_usd
        triggers.append(TriggerRecord(component_id="context", turn=turn, kind="context_summarize",
                                      detail=f"{n_older} turn(s) folded by '{name}'"))


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


def _verify(env: Environment, stop_reason: str, error: str) -> Verdict:
    if stop_reason == "replay_divergence":  # the state is not the one the prefix recorded: nothing to judge
        return Verdict(score=0.0, failed_checks=["replay_divergence"], feedback=error)
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
    prefix: Prefix | list[dict[str, Any]] | None = None,
    on_divergence: Literal["raise", "record"] = "record",
    tag: str = "rollout",
    tool_choice: ToolChoice | None = None,
    summarizers: Mapping[str, ModelRole | ModelClient] | None = None,
    seed_requests: bool = True,
) -> Trajectory:
    """Run one episode; see the module docstring for the contract. Never raises for the episode's failure.

    `prefix`: a `Prefix` (`agents.prefix.prefix_of(traj, turn)`, which carries the recorded turns) or plain
    OpenAI messages. `on_divergence`: when the replayed prefix does not reproduce its recorded tool results,
    "record" ends the episode with stop reason `replay_divergence` (score 0, `error` names the turn and both
    results; count them and drop the sample), "raise" raises `agents.prefix.ReplayDivergence`.
    `summarizers` resolves the context policy's `summarize_with` role names. `seed_requests` sends `seed` with
    every model call (reproducible sampling). vLLM's CPU build kills its engine ("CPU Generator does not use
    offset") when a seeded request is prefilled in chunks; `deploy.vllm_server.ServeSpec` turns chunked prefill
    off on CPU for that reason. Set it False for a server started some other way.
    """
    if on_divergence not in ("raise", "record"):
        raise ValueError(f"on_divergence must be 'raise' or 'record', got {on_divergence!r}")
    t0 = time.perf_counter()
    client = model if isinstance(model, ModelClient) else ModelClient(model)
    stop_reason, error = "error", ""
    runner: _Runner | None = None
    try:
        rendered = render(harness, env.tools())
        runner = _Runner(client, harness, env, rendered, seed, limits, tool_choice, summarizers or {}, seed_requests)
        with shared_env.share(env) as runner.env_key:
            stop_reason = await asyncio.wait_for(_body(runner, prefix), timeout=limits.wall_s)
    except _Stop as s:
        stop_reason, error = s.reason, s.error
    except ReplayDivergence as e:
        if on_divergence == "raise":
            raise
        stop_reason, error = "replay_divergence", str(e)
    except (asyncio.TimeoutError, TimeoutError):
        stop_reason, error = "timeout", f"episode passed its wall-clock limit of {limits.wall_s}s"
    except Exception as e:  # an episode's own failure is recorded, never raised (error policy)
        log.warning("episode on %s failed: %s: %s", env.instance.id, type(e).__name__, e)
        stop_reason, error = "error", f"{type(e).__name__}: {e}"
    state = runner.s if runner else EpisodeState()
    if state.pending_triggers and state.turns:
        state.turns[-1].triggers.extend(state.pending_triggers)  # hooks fired before a call that never returned
    _dangling_fix(state.messages)
    return Trajectory(
        instance=env.instance, harness_id=harness.id, model_id=client.role.id, seed=seed, messages=state.messages,
        tools=(runner.tools_openai or []) if runner else [], turns=state.turns, stop_reason=stop_reason,
        verdict=_verify(env, stop_reason, error), error=error, wall_s=time.perf_counter() - t0, tag=tag,
        injected_faults=state.injected, prefix_turns=state.prefix_turns,
    ).with_id(_prefix_key(prefix))


async def _body(runner: _Runner, prefix: Prefix | list[dict[str, Any]] | None) -> str:
    await runner.start(prefix)
    return await runner.loop()


def _prefix_key(prefix: Prefix | list[dict[str, Any]] | None) -> str:
    if prefix is None:
        return ""
    return (prefix if isinstance(prefix, Prefix) else Prefix(messages=prefix)).key


__all__ = ["BLOCKED_PREFIX", "HOOK_PREFIX", "NOT_RUN", "Limits", "Prefix", "ReplayDivergence", "run_episode"]
