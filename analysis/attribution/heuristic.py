"""`heuristic`: the offline attributor (the embedded default). Rules over trajectory features and check hints.

The rules run in this order; the first that matches decides (its confidence is fixed per rule):

| # | rule | category | confidence |
|---|---|---|---|
| 1 | infrastructure stop (`model_error`, `timeout`, `error` (a hook stop included), `harness_stop`, `context_overflow`, `cost_cap`, `truncated`) or a crashed verifier | environment_or_harness | 0.9 |
| 2 | a hook blocked a valid call (known tool, schema-valid, first of its kind) | environment_or_harness | 0.7 |
| 3 | a tool call errored or was malformed and was never repaired (a failing call repeated in a loop is left to rule 4), or the environment ran a call whose arguments break the tool's schema | tool_use | 0.8 |
| 4 | plan structure: out of turns (`max_turns`), a loop of identical consecutive calls, a paginated listing with pages never fetched, an input file the task names and no call touched | planning | 0.75 |
| 5 | lost context: an unchanged read repeated later (re-query); an item the failed checks name that the model had retrieved (listed, then opened or used) and its output lost (`dropped_items`); or the primary failed check is a value check (hint implicit_knowledge) and the conversation had passed `long_context_chars` at the turn that wrote the output | long_context | 0.65 / 0.6 / 0.55 |
| 6 | the primary failed check (first failed in the family's causal order, `check_hints.py`) and its hint; `output` resolves to instruction_following when a write named something the task never mentions, else planning; a check whose quoted literal format (`'Total: $...'`) the output lacks -> instruction_following | the hint | 0.6 |
| 7 | repaired tool errors only | tool_use | 0.35 |
| - | nothing matched | unattributed | 0.0 |

Evidence turns are the turns the matching rule points at (for rule 6: the last write turn, else the last turn).
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field

from agents.records import Trajectory
from analysis.attribution.check_hints import primary_failed_check
from analysis.attribution.features import INFRA_STOPS, Features, extract_features
from analysis.attribution.ontology import UNATTRIBUTED, Bucket
from analysis.attribution.records import Attribution

NAME = "heuristic"


class HeuristicConfig(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    loop_n: int = Field(default=3, ge=2, description="Identical consecutive calls that make a loop.")
    long_context_chars: int = Field(
        default=24_000, gt=0, description="Conversation characters past which a value failure at the output turn "
                                          "counts as lost context (above every oracle trajectory measured: 17.3k).")
    lost_min_chars: int = Field(
        default=3000, ge=0, description="Conversation characters at the last turn that carried a dropped item "
                                        "below which the item counts as skipped (planning), not lost.")


class Decision(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    category: Bucket
    turns: list[int]
    rationale: str
    confidence: float


Rule = Callable[[Features, HeuristicConfig], Decision | None]


def _last(f: Features) -> list[int]:
    return [f.n_turns - 1] if f.n_turns else []


def infrastructure(f: Features, cfg: HeuristicConfig) -> Decision | None:
    if f.stop_reason in INFRA_STOPS:
        why = f"stop reason {f.stop_reason}" + (f": {f.error[:160]}" if f.error else "")
        return Decision(category="environment_or_harness", turns=_last(f), rationale=why, confidence=0.9)
    if "verify_crashed" in f.failed_checks:
        return Decision(category="environment_or_harness", turns=[], rationale="the verifier crashed", confidence=0.9)
    return None


def blocked_valid_call(f: Features, cfg: HeuristicConfig) -> Decision | None:
    if not f.blocked_valid_turns:
        return None
    names = sorted({c.name for c in f.calls if c.blocked and c.turn in f.blocked_valid_turns})
    return Decision(category="environment_or_harness", turns=f.blocked_valid_turns, confidence=0.7,
                    rationale=f"a harness hook blocked a valid first call of {', '.join(names)}")


def tool_misuse(f: Features, cfg: HeuristicConfig) -> Decision | None:
    turns = sorted((set(f.unrecovered_error_turns) - set(f.loop_turns)) | set(f.schema_turns))
    if not turns:  # the same failing call repeated is a loop: rule 4's (planning)
        return None
    bad = [c for c in f.calls if c.turn in turns and (c.error or c.malformed or c.schema_problem)]
    what = "; ".join(f"{c.name}: {c.schema_problem or c.result[:80]}" for c in bad[:3])
    return Decision(category="tool_use", turns=turns, confidence=0.8,
                    rationale=f"tool call(s) that failed or broke the schema and were never repaired ({what})")


def plan_structure(f: Features, cfg: HeuristicConfig) -> Decision | None:
    if f.stop_reason == "max_turns":
        return Decision(category="planning", turns=f.loop_turns or _last(f), confidence=0.75,
                        rationale=f"ran out of turns ({f.n_turns}) without finishing")
    if f.loop_turns:
        return Decision(category="planning", turns=f.loop_turns, confidence=0.75,
                        rationale=f"looped: {cfg.loop_n}+ identical consecutive calls")
    if f.page_gap_turns:
        return Decision(category="planning", turns=f.page_gap_turns, confidence=0.75,
                        rationale="a paginated listing was not read to its last page")
    if f.unvisited_sources:
        return Decision(category="planning", turns=_last(f), confidence=0.75,
                        rationale=f"never touched {', '.join(f.unvisited_sources[:3])}, named in the task")
    return None


def _output_turns(f: Features) -> list[int]:
    return f.write_turns[-1:] or _last(f)


def lost_context(f: Features, cfg: HeuristicConfig) -> Decision | None:
    if f.requery_turns:
        return Decision(category="long_context", turns=f.requery_turns, confidence=0.65,
                        rationale=f"re-read unchanged information it already had (turns {f.requery_turns})")
    if f.dropped_items:
        sizes = [f.context_chars[t] for t in f.dropped_turns if t < len(f.context_chars)]
        return Decision(category="long_context", turns=f.dropped_turns, confidence=0.6,
                        rationale=f"had {', '.join(f.dropped_items[:3])} (retrieved by turn {f.dropped_turns[-1]}, "
                                  f"{max(sizes, default=0)} characters of context) and lost it from its output")
    primary = primary_failed_check(f.family, f.failed_checks)
    turn = _output_turns(f)
    if primary is None or not turn or primary[1].resolve(f.feedback.get(primary[0], "")) != "implicit_knowledge":
        return None
    size = f.context_chars[turn[0]] if turn[0] < len(f.context_chars) else 0
    if size <= cfg.long_context_chars:
        return None
    return Decision(category="long_context", turns=turn, confidence=0.55,
                    rationale=f"{primary[0]} has wrong values, written with {size} characters of context "
                              f"(> {cfg.long_context_chars})")


def check_hint(f: Features, cfg: HeuristicConfig) -> Decision | None:
    primary = primary_failed_check(f.family, f.failed_checks)
    if primary is None:
        return None
    check, hint = primary
    category = hint.resolve(f.feedback.get(check, ""))
    why = f"first failed check in causal order: {check}" + (f" ({hint.why})" if hint.why else "")
    if check in f.missing_literals and category != "planning":
        return Decision(category="instruction_following", turns=_output_turns(f), confidence=0.6,
                        rationale=f"{why}; the output lacks the literal format the check quotes")
    if category == "output":
        if f.unmentioned_outputs:
            return Decision(category="instruction_following", turns=_output_turns(f), confidence=0.6,
                            rationale=f"{why}; wrote {', '.join(f.unmentioned_outputs[:3])}, a name the task never gives")
        return Decision(category="planning", turns=_last(f), confidence=0.6,
                        rationale=f"{why}; the output was never produced" + ("" if f.write_turns else " (no write at all)"))
    return Decision(category=category, turns=_output_turns(f), rationale=why, confidence=0.6)


def repaired_tool_errors(f: Features, cfg: HeuristicConfig) -> Decision | None:
    if not f.recovered_error_turns:
        return None
    return Decision(category="tool_use", turns=f.recovered_error_turns, confidence=0.35,
                    rationale="only evidence: tool calls that failed before being repaired")


RULES: tuple[Rule, ...] = (infrastructure, blocked_valid_call, tool_misuse, plan_structure, lost_context, check_hint,
                           repaired_tool_errors)


class HeuristicAttributor:
    """Rules over features and check hints (module docstring); deterministic, offline, no model."""

    name = NAME

    def __init__(self, config: HeuristicConfig | None = None) -> None:
        self.config = config or HeuristicConfig()

    def decide(self, trajectory: Trajectory) -> Attribution:
        t = trajectory.require_view(self.name)
        if t.passed:
            raise ValueError(f"trajectory {t.id} passed: only failing rollouts are attributed")
        f = extract_features(t, self.config.loop_n, self.config.lost_min_chars)
        for rule in RULES:
            d = rule(f, self.config)
            if d is not None:
                return Attribution(trajectory_id=t.id, category=d.category, evidence_turns=d.turns,
                                   rationale=f"[{rule.__name__}] {d.rationale}", attributor=self.name,
                                   confidence=d.confidence)
        return Attribution(trajectory_id=t.id, category=UNATTRIBUTED, rationale="no rule matched",
                           attributor=self.name, confidence=0.0)

    async def attribute(self, trajectory: Trajectory) -> Attribution:
        return self.decide(trajectory)
