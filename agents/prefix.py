"""Prefix continuation: rebuild an episode's state after a recorded prefix, and verify that it is the state
the recorded turns saw.

    p = prefix_of(traj, turn=5)                      # turns 0-4 of a stored trajectory, with their records
    p = p.then(rewritten_assistant_message)          # optional: a turn whose tool calls have not run yet
    traj2 = await run_episode(model, harness, env, seed, prefix=p, on_divergence="record")

Restoring a prefix: the environment is rebuilt with `env.replay(...)` of the tool calls that actually ran (not
blocked calls, not calls the runtime refused as malformed, not unknown tools); helper tools (notes,
calculator) run again in the runtime; a composite tool's call replays the environment calls it expands into.
Every replayed result is then compared with the recorded one after the family's `normalize_result(tool,
content)` (volatile parts such as timestamps replaced): the full recorded result when the prefix carries its
turn records (`prefix_of`), else the tool message as the model saw it (the replayed result is truncated by the
harness's context policy first). The first mismatch raises `ReplayDivergence` naming the turn, the call and
both results: a silent divergence would train on a state the model never saw. `run_episode(on_divergence=...)`
decides whether that raises or ends the episode with stop reason `replay_divergence`.

Turns of the prefix are recorded too (`turns[i]` = assistant message i): the prefix's own turn records
when it has them (token ids, logprobs and context cut included, so the continued trajectory still holds
what the earlier model saw and produced), else records built from the messages (no tokens or latency).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

import tasks
from agents.composite_call import expand_call, joined
from agents.episode import EpisodeState
from agents.records import InjectedFault, Trajectory, TurnRecord, parse_tool_calls
from agents.token_ids import turn_token_ids
from agents.tool_args import OVER_CAP_PREFIX
from harness.composite import CompositeTool
from harness.context import ContextPolicy, truncate
from harness.hooks import BLOCKED_PREFIX, NOT_RUN
from harness.render import Rendered
from tasks.base import Environment
from tasks.records import ToolCall, ToolResult

_CLIP = 600  # characters of each result quoted in a divergence message (the exception keeps them whole)


class Prefix(BaseModel):
    """A conversation to continue: OpenAI messages, optionally with the turn records they came from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    messages: list[dict[str, Any]] = Field(description="OpenAI messages; a system message is added when missing.")
    turns: list[TurnRecord] = Field(
        default_factory=list, description="Records of the first assistant turns of `messages` (from a Trajectory).")
    injected_faults: list[InjectedFault] = Field(
        default_factory=list, description="Simulation ground truth of those turns (flawed students only).")

    @property
    def key(self) -> str:
        """Content hash of the messages: part of a continued trajectory's id."""
        raw = json.dumps(self.messages, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(raw.encode()).hexdigest()[:16]

    def then(self, message: dict[str, Any]) -> "Prefix":
        """This prefix plus one more message (e.g. an expert-rewritten assistant turn whose calls run first)."""
        return self.model_copy(update={"messages": [*self.messages, message]})


def prefix_of(traj: Trajectory, turn: int) -> Prefix:
    """The conversation of `traj` before the assistant message of `turn` (0 <= turn <= number of turns), with
    the records of turns 0..turn-1, so a continuation compares full tool results and keeps their token ids."""
    starts = [i for i, m in enumerate(traj.messages) if m.get("role") == "assistant"]
    if not 0 <= turn <= len(starts):
        raise ValueError(f"turn {turn} is outside 0..{len(starts)} for trajectory {traj.id or traj.instance.id}")
    cut = starts[turn] if turn < len(starts) else len(traj.messages)
    return Prefix(messages=json.loads(json.dumps(traj.messages[:cut])),
                  turns=[t.model_copy(deep=True) for t in traj.turns[:turn]],
                  injected_faults=[f for f in traj.injected_faults if f.turn < turn])


def prefix_messages(traj: Trajectory, turn: int) -> list[dict[str, Any]]:
    """Only the messages of `prefix_of(traj, turn)` (replay then compares against the results as shown)."""
    return prefix_of(traj, turn).messages


class ReplayDivergence(RuntimeError):
    """A replayed tool result differs from the recorded one: the prefix does not lead to the recorded state."""

    def __init__(self, turn: int, call: ToolCall, recorded: str, replayed: str) -> None:
        self.turn, self.call, self.recorded, self.replayed = turn, call, recorded, replayed
        super().__init__(f"replay diverged at turn {turn}: {call.name}({call.arguments_json()[:200]}) "
                         f"recorded {_clip(recorded)!r}, replayed {_clip(replayed)!r}")


def _clip(text: str) -> str:
    return text if len(text) <= _CLIP else f"{text[:_CLIP // 2]} ... {text[-_CLIP // 2:]}"


@dataclass
class _Answered:
    """A tool call of the prefix that has a tool message (whether or not it reached the environment)."""

    turn: int
    call: ToolCall
    shown: str  # the tool message's content
    recorded: ToolResult | None  # the full result, when the prefix carries the turn's record


Segment = tuple[dict[str, Any], list[ToolCall], dict[str, str]]


def _segments(msgs: list[dict[str, Any]]) -> list[Segment]:
    """Per assistant message: (message, its parsed calls, call id -> content of the tool messages after it)."""
    out: list[Segment] = []
    for m in msgs:
        if m.get("role") == "assistant":
            out.append((m, parse_tool_calls(m.get("tool_calls")), {}))
        elif m.get("role") == "tool" and out:
            out[-1][2].setdefault(str(m.get("tool_call_id")), str(m.get("content") or ""))
    return out


def _answered(segments: list[Segment], turns: list[TurnRecord]) -> list[_Answered]:
    out: list[_Answered] = []
    for turn, (_, calls, answers) in enumerate(segments):
        rec = turns[turn] if turn < len(turns) else None
        recorded = dict(zip([c.id for c in rec.tool_calls], rec.tool_results, strict=False)) if rec else {}
        out += [_Answered(turn, c, answers[c.id], recorded.get(c.id)) for c in calls if c.id in answers]
    return out


def result_normalizer(family: str) -> Callable[[str, str], str]:
    """The family's `normalize_result`; identity for an environment outside the task registry (tests)."""
    if family in tasks.families():
        return tasks.get(family).normalize_result
    return lambda tool, content: content


async def _replay(state: EpisodeState, env: Environment, rendered: Rendered, answered: list[_Answered],
                  composites: Mapping[str, CompositeTool]) -> dict[int, ToolResult]:
    """Run again every answered call that ran the first time; index in `answered` -> the new result.

    A composite call is expanded into its environment calls, which replay in place; their results are joined
    again as the runtime joined them."""
    results: dict[int, ToolResult] = {}
    env_calls: list[ToolCall] = []
    spans: dict[int, tuple[int, int, bool]] = {}  # index in answered -> its slice of env_calls, composite or not
    for k, a in enumerate(answered):
        state.call_counts[(a.call.name, a.call.arguments_json())] += 1
        if a.shown.startswith((BLOCKED_PREFIX, NOT_RUN, OVER_CAP_PREFIX)) or isinstance(a.call.arguments, str):
            continue
        if a.call.name in rendered.helper_tools:
            results[k] = state.helpers.call(a.call.name, a.call.arguments)
        elif a.call.name in rendered.composite_tools and a.call.name in composites:
            sub = expand_call(composites[a.call.name], a.call)
            if isinstance(sub, ToolResult):
                results[k] = sub
            else:
                spans[k] = (len(env_calls), len(env_calls) + len(sub), True)
                env_calls += sub
        elif a.call.name in rendered.env_tools:
            spans[k] = (len(env_calls), len(env_calls) + 1, False)
            env_calls.append(a.call)
    steps = await env.replay(env_calls)
    for k, (i, j, composite) in spans.items():
        results[k] = joined([(st.call, st.result) for st in steps[i:j]]) if composite else steps[i].result
        state.succeeded.update(st.call.name for st in steps[i:j] if not st.result.is_error)
    state.succeeded.update(answered[k].call.name for k, r in results.items() if not r.is_error)
    return results


def _verify_replay(answered: list[_Answered], results: dict[int, ToolResult], policy: ContextPolicy,
                  normalize: Callable[[str, str], str]) -> None:
    """Raise `ReplayDivergence` at the first replayed result that differs from its recorded one."""
    for k, a in enumerate(answered):
        if k not in results:
            continue
        got = results[k].content
        if a.recorded is not None:
            want = a.recorded.content
        else:
            want, got = a.shown, truncate(got, policy.max_tool_result_chars, policy.head_fraction)[0]
        if normalize(a.call.name, want) != normalize(a.call.name, got):
            raise ReplayDivergence(a.turn, a.call, want, got)


def _records(segments: list[Segment], answered: list[_Answered], results: dict[int, ToolResult], turns: list[TurnRecord]) -> list[TurnRecord]:
    by_call = {(a.turn, a.call.id): results.get(k) or a.recorded or
               ToolResult(content=a.shown, is_error=a.shown.startswith(("Error", "[harness]")))
               for k, a in enumerate(answered)}
    out: list[TurnRecord] = []
    for turn, (m, calls, _) in enumerate(segments):
        if turn < len(turns):
            out.append(turns[turn].model_copy(deep=True))
            continue
        got = [by_call[(turn, c.id)] for c in calls if (turn, c.id) in by_call]
        out.append(TurnRecord(index=turn, assistant=m, tool_calls=calls, tool_results=got))
    return out


async def restore_prefix(state: EpisodeState, env: Environment, rendered: Rendered, policy: ContextPolicy,
                         prefix: Prefix | list[dict[str, Any]],
                         composites: Mapping[str, CompositeTool] | None = None) -> list[ToolCall]:
    """Fill `state` with the prefix (messages, turns, tool state, hook counters) after a verified replay.

    Returns the tool calls of a final assistant message that have no answer yet (to run first). Raises
    `ReplayDivergence`; `state.messages` then already holds the prefix, `state.turns` is empty.
    """
    p = prefix if isinstance(prefix, Prefix) else Prefix(messages=prefix)
    msgs = json.loads(json.dumps(p.messages))  # deep copy; the caller's messages are never changed
    if not msgs or msgs[0].get("role") != "system":
        msgs.insert(0, {"role": "system", "content": rendered.system_prompt})
    state.messages = msgs
    segments = _segments(msgs)
    if len(p.turns) > len(segments):
        raise ValueError(f"prefix has {len(p.turns)} turn records but {len(segments)} assistant messages")
    answered = _answered(segments, p.turns)
    results = await _replay(state, env, rendered, answered, composites or {})
    _verify_replay(answered, results, policy, result_normalizer(env.instance.family))
    state.turns = _records(segments, answered, results, p.turns)
    state.prefix_turns = len(state.turns)
    state.injected = list(p.injected_faults)
    last = turn_token_ids(state.turns)[-1] if state.turns else None
    state.last_ids = [] if last is None else [*last[0], *(last[1] or [])]
    if not segments or msgs[-1].get("role") != "assistant":
        return []
    _, calls, answers = segments[-1]
    return [c for c in calls if c.id not in answers]
