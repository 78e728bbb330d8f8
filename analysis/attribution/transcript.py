"""A compressed, numbered transcript of a trajectory for a judge model.

Trimming rule (deterministic, in this order):
1. The task text is cut to `instruction_chars`; each failed check's feedback line to 300 characters.
2. Each turn shows its number, the conversation size before it, the assistant text (cut to `text_chars`),
   every call with its arguments (cut to `args_chars`) and result (cut to `result_chars`, head and tail
   kept), the call's fate (ERROR / BLOCKED / NOT RUN / MALFORMED) and the harness components that fired.
3. A trajectory of more than `head_turns + tail_turns` turns keeps its first `head_turns` and last
   `tail_turns` turns, plus up to `max_flagged` middle turns that show trouble (an error, a malformed or
   blocked call, a harness component firing); each omitted run becomes one line naming its calls.
4. While the whole text is longer than `max_chars`, the per-result and per-argument limits halve (down to
   40 characters); past that the text is cut at `max_chars` with a marker.
"""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, ConfigDict, Field

from agents.records import Trajectory, TurnRecord
from analysis.attribution.calls import Call, calls_of
from analysis.attribution.features import context_chars, feedback_lines


class TranscriptConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    instruction_chars: int = Field(default=2000, gt=0)
    text_chars: int = Field(default=300, gt=0)
    args_chars: int = Field(default=300, gt=0)
    result_chars: int = Field(default=400, gt=0)
    head_turns: int = Field(default=4, ge=0)
    tail_turns: int = Field(default=12, ge=1)
    max_flagged: int = Field(default=8, ge=0)
    max_chars: int = Field(default=16_000, ge=1000)


def cut(text: str, limit: int) -> str:
    """`text` if short enough, else its head and tail around a marker naming how much was cut."""
    if len(text) <= limit:
        return text
    half = max(1, limit // 2)
    return f"{text[:half]} [...{len(text) - 2 * half} chars...] {text[-half:]}"


def _fate(c: Call) -> str:
    if c.malformed:
        return "MALFORMED "
    return "BLOCKED " if c.blocked else "NOT RUN " if c.not_run else "ERROR " if c.error else ""


def _turn_lines(turn: TurnRecord, calls: list[Call], size: int, cfg: TranscriptConfig, args: int, result: int) -> list[str]:
    text = " ".join(str(turn.assistant.get("content") or "").split())
    lines = [f"[turn {turn.index}] (context {size} chars) assistant: {cut(text, cfg.text_chars) or '(no text)'}"]
    for c in calls:
        lines.append(f"  call {c.name}({cut(c.args_json, args)}) -> {_fate(c)}{cut(' '.join(c.result.split()), result)}")
        if c.schema_problem:
            lines.append(f"    schema: {c.schema_problem}")
    for trig in turn.triggers:
        lines.append(f"  harness: {trig.component_id} ({trig.kind}{': ' + trig.detail if trig.detail else ''})")
    if not calls:
        lines.append("  (no tool call: final answer)")
    return lines


def _flagged(turn: TurnRecord, calls: list[Call]) -> bool:
    return bool(turn.triggers) or any(c.error or c.malformed or c.blocked or c.schema_problem for c in calls)


def kept_turns(t: Trajectory, by_turn: dict[int, list[Call]], cfg: TranscriptConfig) -> list[int]:
    """Turn indices shown in full (rule 3)."""
    n = len(t.turns)
    if n <= cfg.head_turns + cfg.tail_turns:
        return list(range(n))
    head, tail = list(range(cfg.head_turns)), list(range(n - cfg.tail_turns, n))
    middle = [i for i in range(cfg.head_turns, n - cfg.tail_turns) if _flagged(t.turns[i], by_turn.get(i, []))]
    return head + middle[:cfg.max_flagged] + tail


def _omitted(turns: list[int], by_turn: dict[int, list[Call]]) -> str:
    names = Counter(c.name for i in turns for c in by_turn.get(i, []))
    what = ", ".join(f"{k} x{v}" for k, v in names.most_common(6)) or "no calls"
    return f"[turns {turns[0]}-{turns[-1]} omitted: {what}]"


def _render(t: Trajectory, cfg: TranscriptConfig, args: int, result: int) -> str:
    by_turn: dict[int, list[Call]] = {}
    for c in calls_of(t):
        by_turn.setdefault(c.turn, []).append(c)
    sizes = context_chars(t)
    feedback = feedback_lines(t.verdict.feedback, list(t.verdict.failed_checks))
    lines = [f"TASK ({t.family}): {cut(t.instance.instruction, cfg.instruction_chars)}",
             f"OUTCOME: score {t.verdict.score:.2f}, stop reason {t.stop_reason}" + (f", error: {cut(t.error, 300)}" if t.error else ""),
             "FAILED CHECKS:", *[f"- {k}: {cut(v, 300)}" for k, v in feedback.items()], "TRANSCRIPT:"]
    keep = kept_turns(t, by_turn, cfg)
    gap: list[int] = []
    for i, turn in enumerate(t.turns):
        if i not in keep:
            gap.append(i)
            continue
        if gap:
            lines.append(_omitted(gap, by_turn))
            gap = []
        lines += _turn_lines(turn, by_turn.get(i, []), sizes[i] if i < len(sizes) else 0, cfg, args, result)
    return "\n".join(lines)


def compress_transcript(trajectory: Trajectory, config: TranscriptConfig | None = None) -> str:
    """The judge's view of a trajectory (module docstring: the trimming rule). Refuses ground truth."""
    t = trajectory.require_view("compress_transcript")
    cfg = config or TranscriptConfig()
    args, result = cfg.args_chars, cfg.result_chars
    text = _render(t, cfg, args, result)
    while len(text) > cfg.max_chars and (args > 40 or result > 40):
        args, result = max(40, args // 2), max(40, result // 2)
        text = _render(t, cfg, args, result)
    if len(text) > cfg.max_chars:
        text = text[:cfg.max_chars - 40] + "\n[transcript cut at the length limit]"
    return text
