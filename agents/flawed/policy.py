"""One turn of the simulated student: take in what the last turn did, react to feedback, act.

1. Absorb: execute the last turn's calls on the belief (the meant call where the student slipped), skipping
   calls a hook blocked; note tool errors the belief did not get (the student's surprise) and the
   `[harness]` messages that arrived since its last turn.
2. React (mechanical, drawn from the profile): a `[harness]` message that contains a cue of a held fault
   is followed with `recovery.hook` (a belief is dropped; a slip makes the student re-sync its belief with
   the real state); an unexpected tool error re-syncs with `recovery.tool_error`; a refused finish is
   given up with `recovery.hook` when a harness message came with the refusal; a loop ends with
   `recovery.loop_exit` per turn (or `recovery.hook` when a harness message names the looping tool).
3. Act: the oracle's action on the view of the belief that the held beliefs make (`intended`); then at
   most one new fault, drawn from the candidates that apply at this turn (see `candidates`), unless the
   profile's `max_faults` is reached.

Every draw comes from the `rng` the provider seeds from (model, instance, per-turn seed), in a fixed order,
so a rollout with the same seed repeats its faults exactly.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agents.flawed.generic import describe_call, tool_use_slip, tool_use_variants
from agents.flawed.menu import Action, Belief, NotApplicable, same_action
from agents.flawed.state import BLOCKED, Conversation, Latch
from agents.flawed.views import view_of
from agents.records import InjectedFault
from harness.context import content_chars
from tasks.base import Environment, Family
from tasks.records import FinalAnswer, Step, ToolCall

log = logging.getLogger(__name__)
FINISH_TEXT = "I have completed the task."
ANY = "*"  # a cue every harness message contains
LOOP_CUES = ("same arguments", "repeated", "again", "loop")
TOOL_USE_CUES = ("argument", "unknown tool", "schema", "json")


@dataclass
class Feedback:
    harness: list[str]  # [harness] messages since the student's last turn, lower-cased
    unexpected_errors: int  # real tool errors its belief did not get
    refused_finish: bool  # its last turn was a final answer, and the episode went on


@dataclass
class Made:
    """What committing a fault produced: the emitted action, what the belief executes for it, how the
    fault is held (a latch mode and its cues; None: not held) and the ground-truth detail."""

    emitted: Action
    meant: ToolCall | None
    detail: str
    hold: str | None = None
    cues: tuple[str, ...] = ()
    belief: tuple[Belief, str] | None = None
    kind: str | None = None  # the concrete kind, where the candidate stands for several (tool_use)


Commit = Callable[[random.Random], Awaitable[Made]]


@dataclass
class Candidate:
    kind: str
    category: str
    p: float
    settle: str | None  # once-per-episode faults: settled when drawn and missed
    commit: Commit


class Student:
    """The student's turn over one conversation state and its belief environment."""

    def __init__(self, conv: Conversation, env: Environment, family: Family) -> None:
        self.c, self.env, self.fam = conv, env, family

    # --- 1. absorb --------------------------------------------------------------------------------
    async def absorb(self, messages: list[dict[str, Any]]) -> Feedback:
        c = self.c
        answers = {m.get("tool_call_id"): str(m.get("content") or "") for m in messages if m.get("role") == "tool"}
        unexpected = 0
        for call, meant in c.pending:
            shown = answers.get(call.id)
            if shown is None or shown.startswith(BLOCKED):
                continue  # never reached the environment
            c.actual.append(call)
            if meant is None:
                continue
            result = await self.env.call(meant.name, meant.arguments)
            c.history.append(Step(call=meant, result=result))
            c.belief_calls.append(meant)
            unexpected += shown.startswith("Error") and not result.is_error
        c.pending = []
        last = max((i for i, m in enumerate(messages) if m.get("role") == "assistant"), default=-1)
        harness = [str(m.get("content") or "").lower() for m in messages[last + 1:]
                   if m.get("role") == "user" and str(m.get("content") or "").startswith("[harness]")]
        return Feedback(harness=harness, unexpected_errors=unexpected, refused_finish=c.last_final)

    # --- 2. react ---------------------------------------------------------------------------------
    async def react(self, fb: Feedback, rng: random.Random) -> None:
        c, rec = self.c, self.c.profile.recovery
        resync = False
        for latch in list(c.latches):
            if latch.mode == "finish":
                named = fb.refused_finish and bool(fb.harness)
            else:
                named = any(cue == ANY or cue in m for m in fb.harness for cue in latch.cues)
            if named and rng.random() < rec.hook:
                c.latches.remove(latch)
                resync |= latch.mode == "slip"
            elif latch.mode == "loop" and rng.random() < rec.loop_exit:
                c.latches.remove(latch)
        if fb.unexpected_errors and c.diverged and rng.random() < rec.tool_error:
            resync = True
        if resync:
            await self.resync()
        if not any(lt.mode == "loop" for lt in c.latches):
            c.loop_call = None

    async def resync(self) -> None:
        """The student looks again: its belief becomes the real state (held beliefs stay; slips are gone)."""
        c = self.c
        c.history = await self.env.replay(c.actual)
        c.belief_calls = list(c.actual)
        c.latches = [lt for lt in c.latches if lt.mode != "slip"]

    # --- 3. act -----------------------------------------------------------------------------------
    def oracle(self, beliefs: list[tuple[Belief, str]]) -> Action:
        return self.fam.oracle_action(view_of(self.env, beliefs), self.c.history)

    async def act(self, messages: list[dict[str, Any]], turn: int, rng: random.Random) -> tuple[Action, InjectedFault | None]:
        c = self.c
        if c.loop_call is not None:
            return self._emit(c.loop_call, c.loop_call), None
        if c.finishing:
            return self._emit(FinalAnswer(text=FINISH_TEXT), None), None
        intended = self.oracle(c.beliefs())
        limit = c.profile.max_faults
        if limit is not None and c.n_faults >= limit:
            return self._emit(intended, intended), None
        long = content_chars(messages) > c.profile.context_limit(c.menu.family)
        chosen = self._draw(self.candidates(intended, long), rng)
        if chosen is None:
            return self._emit(intended, intended), None
        made = await chosen.commit(rng)
        fault = InjectedFault(turn=turn, category=chosen.category, kind=made.kind or chosen.kind, detail=made.detail)
        c.n_faults += 1
        if made.hold is not None:
            c.latches.append(Latch(fault=fault, mode=made.hold, cues=made.cues, belief=made.belief))  # type: ignore[arg-type]
        return self._emit(made.emitted, made.meant), fault

    def _emit(self, action: Action, meant: Action | None) -> Action:
        c = self.c
        c.last_final = isinstance(action, FinalAnswer)
        if isinstance(action, ToolCall):
            action = action.model_copy(update={"id": f"call_{c.n_calls}"})
            c.n_calls += 1
            c.pending = [(action, meant.model_copy(update={"id": action.id}) if isinstance(meant, ToolCall) else None)]
            c.emitted.append(("", ((action.name, action.arguments_json()),)))
        else:
            c.emitted.append((action.text, ()))
        return action

    def _draw(self, cands: list[Candidate], rng: random.Random) -> Candidate | None:
        hits = []
        for cand in cands:
            if rng.random() < cand.p:
                hits.append(cand)
            elif cand.settle is not None:
                self.c.settled.add(cand.settle)
        return rng.choice(hits) if hits else None

    def rate(self, category: str, kind: str, key: str | None = None, tool: str | None = None) -> float:
        p = self.c.profile.rate(category, kind)
        if key is not None and key in self.c.stated:
            p = min(p, self.c.profile.stated_rate)
        if tool is not None and tool in self.c.example_tools:
            p = min(p, self.c.profile.example_rate)
        return p

    # --- candidates -------------------------------------------------------------------------------
    def candidates(self, intended: Action, long: bool) -> list[Candidate]:
        """Every fault that applies at this turn, in a fixed order (family beliefs, family slips, then the
        generic tool_use, skip_write, finish_early, loop and requery)."""
        out = self._belief_candidates(intended, long) + self._slip_candidates(intended)
        if isinstance(intended, ToolCall):
            out += self._generic_candidates(intended, long)
        return out

    def _belief_candidates(self, intended: Action, long: bool) -> list[Candidate]:
        c, out = self.c, []
        held = c.beliefs()
        held_ids = {f"{b.kind}:{u}" for b, u in held}
        for b in c.menu.beliefs:
            p = self.rate(b.category, b.kind, b.key)
            if p <= 0 or (b.long_context and not long):
                continue
            for unit in b.units(self.env):
                sid = f"{b.kind}:{unit}"
                if sid in c.settled or sid in held_ids:
                    continue
                if b.retrieved is not None and not b.retrieved(self.env, c.history, unit):
                    continue
                try:
                    alt = self.oracle([*held, (b, unit)])
                except Exception as e:  # a view the oracle cannot act on: this belief does not apply here
                    log.debug("belief %s on %s: oracle raised %s", b.kind, unit, e)
                    continue
                if not same_action(alt, intended):
                    out.append(Candidate(b.kind, b.category, p, sid, self._commit_belief(b, unit, alt, intended)))
        return out

    def _commit_belief(self, b: Belief, unit: str, alt: Action, intended: Action) -> Commit:
        async def commit(rng: random.Random) -> Made:
            self.c.settled.add(f"{b.kind}:{unit}")
            detail = (f"{b.detail.format(unit=unit)}. Held from this turn (it acted {_describe(alt)} instead of "
                      f"{_describe(intended)}); dropped only when a [harness] message names it")
            return Made(alt, alt if isinstance(alt, ToolCall) else None, detail, "belief", b.cues, (b, unit))
        return commit

    def _slip_candidates(self, intended: Action) -> list[Candidate]:
        c, out = self.c, []
        view = view_of(self.env, c.beliefs())
        for s in c.menu.slips:
            p = self.rate(s.category, s.kind, s.key)
            if p <= 0 or s.kind in c.settled:
                continue
            try:
                emitted = s.transform(view, intended)
            except NotApplicable:
                continue
            if same_action(emitted, intended):
                continue

            async def commit(rng: random.Random, s=s, emitted=emitted) -> Made:
                self.c.settled.add(s.kind)
                detail = (f"{s.detail}: emitted {_describe(emitted)}, believing it made {_describe(intended)}; "
                          "kept until it re-syncs (an unexpected tool error or a [harness] message naming it)")
                return Made(emitted, intended if isinstance(intended, ToolCall) else None, detail, "slip", s.cues)
            out.append(Candidate(s.kind, s.category, p, s.kind, commit))
        return out

    def _generic_candidates(self, intended: ToolCall, long: bool) -> list[Candidate]:
        c, out = self.c, []
        p = self.rate("tool_use", "tool_use", tool=intended.name)
        if p > 0:
            out.append(Candidate("tool_use", "tool_use", p, None, self._commit_tool_use(intended)))
        p = self.rate("planning", "skip_write")
        if p > 0 and intended.name in c.menu.write_tools:
            out.append(Candidate("skip_write", "planning", p, None, self._commit_skip_write(intended)))
        p = self.rate("planning", "finish_early")
        if p > 0 and c.emitted:
            out.append(Candidate("finish_early", "planning", p, None, self._commit_finish(intended)))
        p = self.rate("planning", "loop")
        if p > 0 and c.actual:
            out.append(Candidate("loop", "planning", p, None, self._commit_loop()))
        p = self.rate("long_context", "requery")
        reads = [s.call for s in c.history if s.call.name in c.menu.read_tools and not s.result.is_error
                 and not same_action(s.call, intended)]
        if p > 0 and long and reads:
            out.append(Candidate("requery", "long_context", p, None, self._commit_requery(reads, intended)))
        return out

    def _commit_tool_use(self, intended: ToolCall) -> Commit:
        async def commit(rng: random.Random) -> Made:
            variant = rng.choice(tool_use_variants(intended, self.c.menu))
            emitted = tool_use_slip(variant, intended, self.c.menu, rng)
            detail = (f"{variant}: emitted {describe_call(emitted)} for {describe_call(intended)}, believing the "
                      "intended call was made; recovered only if it notices the error or a [harness] message "
                      "names the tool or its arguments")
            return Made(emitted, intended, detail, "slip", (intended.name, emitted.name, *TOOL_USE_CUES), kind=variant)
        return commit

    def _commit_skip_write(self, intended: ToolCall) -> Commit:
        async def commit(rng: random.Random) -> Made:
            c = self.c
            result = await self.env.call(intended.name, intended.arguments)  # believed done, never emitted
            c.history.append(Step(call=intended, result=result))
            c.belief_calls.append(intended)
            nxt = self.oracle(c.beliefs())
            detail = (f"skipped {describe_call(intended)} (believes it done) and went on with {_describe(nxt)}; "
                      f"recoverable until the finish if a [harness] message names {intended.name}")
            return Made(nxt, nxt if isinstance(nxt, ToolCall) else None, detail, "slip", (intended.name,))
        return commit

    def _commit_finish(self, intended: ToolCall) -> Commit:
        async def commit(rng: random.Random) -> Made:
            detail = (f"finished early instead of {describe_call(intended)}; irreversible unless an on_finish "
                      "hook refuses the finish (then followed with recovery.hook)")
            return Made(FinalAnswer(text=FINISH_TEXT), None, detail, "finish", (ANY,))
        return commit

    def _commit_loop(self) -> Commit:
        async def commit(rng: random.Random) -> Made:
            call = self.c.actual[-1]
            self.c.loop_call = call
            detail = (f"loops on {describe_call(call)} (repeats it every turn); leaves the loop with "
                      "recovery.loop_exit per turn or recovery.hook after a [harness] message naming the tool")
            return Made(call, call, detail, "loop", (call.name, *LOOP_CUES))
        return commit

    def _commit_requery(self, reads: list[ToolCall], intended: ToolCall) -> Commit:
        async def commit(rng: random.Random) -> Made:
            call = rng.choice(reads)
            detail = (f"context over {self.c.profile.context_limit(self.c.menu.family)} chars: re-queried {describe_call(call)} "
                      f"(already retrieved) instead of {describe_call(intended)}; recoverable (it goes on next turn)")
            return Made(call, call, detail)
        return commit


def _describe(action: Action) -> str:
    return "a final answer" if isinstance(action, FinalAnswer) else describe_call(action)

