"""Observable features of a failing trajectory, the evidence the heuristic attributor's rules read.

Every feature is computed from what the pipeline may see (`Trajectory.view()`): the conversation, the
per-turn records, the stop reason and the verifier's verdict. Turn lists hold 0-based assistant turns.

| feature | definition |
|---|---|
| `context_chars[i]` | characters of the conversation (contents + tool-call arguments) before assistant turn i |
| `unrecovered_error_turns` | a call that errored or was malformed and was never repaired: no later successful call of the same tool naming the same output (path/key/title argument), or, for a tool name the model was never shown, no later successful call at all |
| `recovered_error_turns` | the other erroring or malformed calls |
| `schema_turns` | a call the environment ran although its arguments do not fit the tool's schema |
| `blocked_valid_turns` | a hook blocked a well-formed call (known tool, schema-valid) that was the first of its kind |
| `loop_turns` | a run of >= `loop_n` identical consecutive calls (name + arguments) |
| `requery_turns` | a successful read repeating an earlier successful read with the same arguments and the same result, with other calls in between |
| `dropped_items` | identifiers (codes such as `REQ-3977`, `VIB-01`; file paths) that a failed check's feedback names, that the model had retrieved (at least two successful calls carried it: a read whose result or arguments hold it, or any call whose arguments name it; i.e. listed, then opened or used; or one read whose result the model ignored entirely: no identifier of it named by a later call, while those of another read of the same tool are), with the conversation at least `lost_min_chars` long at the last of them, and that its output lost: no successful write names it, or the last write to an output that once named it no longer does |
| `dropped_turns` | per dropped item, the last turn that carried it (the model had it then) |
| `page_gap_turns` | a paginated listing tool (its results are JSON objects with integer `page` and `pages`) whose pages were not all fetched; browser pages are not parsed (a model may rightly skip listing pages there) |
| `unvisited_sources` | file names the instruction mentions that no call argument ever names (only when no written output has a name the instruction lacks, which would be a renamed output instead) |
| `unmentioned_outputs` | names (path/key/title arguments) of successful writes that the instruction never mentions |
| `write_turns` | turns with a successful write-type call |
| `missing_literals` | failed checks whose feedback quotes a required literal (`'Total: $...'`: the text before the first `:`) that no successful write naming one of the check's items contains: the output ignores a prescribed format |
"""

from __future__ import annotations

import json
import re
from collections import defaultdict

from pydantic import BaseModel, ConfigDict, Field

from agents.records import Trajectory
from analysis.attribution.calls import Call, calls_of

INFRA_STOPS = ("model_error", "timeout", "error", "harness_stop", "context_overflow", "cost_cap", "truncated",
               "replay_divergence")
_FILE_RE = re.compile(r"[\w\-./]*\w\.(?:csv|json|md|xlsx|txt|py|yaml|yml|html)\b")
IDENT_RE = re.compile(r"\b[A-Z][A-Z0-9]*-\d+\b|[\w\-./]*\w\.(?:csv|json|md|xlsx|txt|py|yaml|yml|html)\b")
_SHORT_STRING = 64  # string argument values up to this length identify what a call was about


class Features(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    family: str
    stop_reason: str
    error: str
    n_turns: int
    finished: bool
    calls: list[Call]
    context_chars: list[int]
    unrecovered_error_turns: list[int] = Field(default_factory=list)
    recovered_error_turns: list[int] = Field(default_factory=list)
    schema_turns: list[int] = Field(default_factory=list)
    blocked_valid_turns: list[int] = Field(default_factory=list)
    loop_turns: list[int] = Field(default_factory=list)
    requery_turns: list[int] = Field(default_factory=list)
    dropped_items: list[str] = Field(default_factory=list)
    dropped_turns: list[int] = Field(default_factory=list)
    page_gap_turns: list[int] = Field(default_factory=list)
    unvisited_sources: list[str] = Field(default_factory=list)
    unmentioned_outputs: list[str] = Field(default_factory=list)
    write_turns: list[int] = Field(default_factory=list)
    failed_checks: list[str] = Field(default_factory=list)
    feedback: dict[str, str] = Field(default_factory=dict, description="Failed check -> its feedback line.")
    missing_literals: list[str] = Field(default_factory=list)


def context_chars(trajectory: Trajectory) -> list[int]:
    """Characters of the conversation before each assistant turn (contents plus tool-call arguments)."""
    sizes: list[int] = []
    total = 0
    for m in trajectory.messages:
        if m.get("role") == "assistant":
            sizes.append(total)
        content = m.get("content")
        total += len(content) if isinstance(content, str) else len(json.dumps(content)) if content else 0
        for tc in m.get("tool_calls") or []:
            total += len(str((tc.get("function") or {}).get("arguments") or ""))
    return sizes[:len(trajectory.turns)] + [total] * max(0, len(trajectory.turns) - len(sizes))


def _short_values(args_json: str) -> list[str]:
    """The short string values (not the keys) of a call's arguments, read leniently: a malformed JSON object
    still has them."""
    return [v for v in re.findall(r':\s*"((?:[^"\\]|\\.)*)"', args_json) if 0 < len(v) <= _SHORT_STRING]


def _repairs(bad: Call, later: Call) -> bool:
    """`later` succeeded where `bad` failed: same tool and, when `bad` named an output, the same name; otherwise
    `later` carries every short string value of `bad`'s arguments (the same document, thread, row), so a failed
    call about one thing is not repaired by a successful call about another."""
    if not (later.ok and later.name == bad.name):
        return False
    if bad.named_paths:
        return later.named_paths == bad.named_paths
    return all(v in later.args_json for v in _short_values(bad.args_json))


def _errors(calls: list[Call]) -> tuple[list[int], list[int]]:
    unrecovered, recovered = [], []
    for i, c in enumerate(calls):
        if not (c.error or c.malformed):
            continue
        later = calls[i + 1:]
        unknown_name = c.malformed and c.name not in {x.name for x in calls if not x.malformed}
        values = _short_values(c.args_json)
        fixed = any(x.ok and all(v in x.args_json for v in values) for x in later) if unknown_name \
            else any(_repairs(c, x) for x in later)
        (recovered if fixed else unrecovered).append(c.turn)
    return sorted(set(unrecovered)), sorted(set(recovered))


def _loops(calls: list[Call], n: int) -> list[int]:
    turns: set[int] = set()
    run = 1
    for i in range(1, len(calls) + 1):
        if i < len(calls) and calls[i].key == calls[i - 1].key:
            run += 1
            continue
        if run >= n:
            turns.update(c.turn for c in calls[i - run:i])
        run = 1
    return sorted(turns)


def _requeries(calls: list[Call]) -> list[int]:
    seen: dict[tuple[str, str], tuple[int, str]] = {}
    out = []
    for i, c in enumerate(calls):
        if not c.ok or c.action != "read":
            continue
        earlier = seen.get(c.key)
        if earlier is not None and earlier[1] == c.result and earlier[0] < i - 1:
            out.append(c.turn)
        seen[c.key] = (i, c.result)
    return sorted(set(out))


def _ignored_result(read: Call, calls: list[Call]) -> bool:
    """No identifier of this read's result is named by a later call, while those of another read of the same
    tool are: the model used results of this kind, but not this one."""
    def used(r: Call) -> bool:
        later = " ".join(c.args_json for c in calls if c.turn > r.turn)
        return any(i in later for i in set(IDENT_RE.findall(r.result)))
    siblings = [c for c in calls if c.ok and c.name == read.name and c is not read]
    return not used(read) and any(used(c) for c in siblings)


def _lost(item: str, calls: list[Call]) -> bool:
    """No successful write names `item`, or the last write to an output that once named it no longer does."""
    last_by_output: dict[tuple[str, ...], Call] = {}
    named_once = set()
    for w in (c for c in calls if c.ok and c.action == "write"):
        last_by_output[w.named_paths] = w
        if item in w.args_json:
            named_once.add(w.named_paths)
    return not named_once or any(item not in last_by_output[o].args_json for o in named_once if o)


def _dropped(calls: list[Call], feedback: str, context: list[int], min_chars: int) -> tuple[list[str], list[int]]:
    """Items the failed checks name that the model had retrieved and its output lost (see `dropped_items`)."""
    items, turns = [], []
    for item in sorted(set(IDENT_RE.findall(feedback))):
        carried = [c for c in calls if c.ok and (item in c.args_json or (c.action == "read" and item in c.result))]
        if not carried or context[carried[-1].turn] < min_chars:
            continue
        had = len(carried) >= 2 or (carried[0].action == "read" and _ignored_result(carried[0], calls))
        if had and _lost(item, calls):  # one listing only: a skipped item, not a lost one
            items.append(item)
            turns.append(carried[-1].turn)
    return items, sorted(set(turns))


_LITERAL_RE = re.compile(r"'([^':]{1,40}):[^']*\.\.\.'")


def _missing_literals(calls: list[Call], feedback: dict[str, str]) -> list[str]:
    """Failed checks whose quoted literal no write naming one of their items has (`missing_literals`)."""
    out = []
    writes = [c for c in calls if c.ok and c.action == "write"]
    for check, line in feedback.items():
        literals = [m + ":" for m in _LITERAL_RE.findall(line)]
        for item in set(IDENT_RE.findall(line)) if literals else ():
            naming = [w for w in writes if item in w.args_json]
            if naming and not any(lit in w.args_json for w in naming for lit in literals):
                out.append(check)
                break
    return out


def _page_of(result: str) -> tuple[int, int] | None:
    if not result.startswith("{"):
        return None
    try:
        doc = json.loads(result)
    except (json.JSONDecodeError, ValueError):
        return None
    if isinstance(doc, dict) and isinstance(doc.get("page"), int) and isinstance(doc.get("pages"), int):
        return doc["page"], doc["pages"]
    return None


def _page_gaps(calls: list[Call]) -> list[int]:
    seen: dict[str, set[int]] = defaultdict(set)
    total: dict[str, int] = {}
    last: dict[str, int] = {}
    for c in calls:
        page = _page_of(c.result) if c.ok else None
        if page is not None:
            seen[c.name].add(page[0])
            total[c.name] = max(total.get(c.name, 0), page[1])
            last[c.name] = c.turn
    return sorted(last[name] for name in seen if not set(range(1, total[name] + 1)) <= seen[name])


def _mentioned(name: str, text: str) -> bool:
    return name in text or name.lstrip("./") in text


def _sources(instruction: str, calls: list[Call]) -> tuple[list[str], list[str]]:
    written = {p for c in calls if c.ok and c.action == "write" for p in c.named_paths}
    unmentioned = sorted(p for p in written if not _mentioned(p, instruction))
    if unmentioned:
        return [], unmentioned
    args = " ".join(c.args_json for c in calls)
    files = sorted(set(_FILE_RE.findall(instruction)))
    return [f for f in files if f not in args and f.lstrip("./") not in args], []


def feedback_lines(feedback: str, failed: list[str]) -> dict[str, str]:
    """Failed check -> the text after 'FAILED <check>:' in the verdict's feedback ('' when absent)."""
    out = {c: "" for c in failed}
    for line in feedback.splitlines():
        if line.startswith("FAILED "):
            name, _, why = line[len("FAILED "):].partition(": ")
            if name in out:
                out[name] = why
    return out


def extract_features(trajectory: Trajectory, loop_n: int = 3, lost_min_chars: int = 0) -> Features:
    """The features of one trajectory (a view: refuses one that carries simulation ground truth)."""
    t = trajectory.require_view("extract_features")
    calls = calls_of(t)
    unrecovered, recovered = _errors(calls)
    first_seen: set[tuple[str, str]] = set()
    blocked_valid = []
    for c in calls:
        if c.blocked and not c.malformed and not c.schema_problem and c.key not in first_seen:
            blocked_valid.append(c.turn)
        first_seen.add(c.key)
    unvisited, unmentioned = _sources(t.instance.instruction, calls)
    failed = list(t.verdict.failed_checks)
    feedback = feedback_lines(t.verdict.feedback, failed)
    sizes = context_chars(t)
    dropped, dropped_turns = _dropped(calls, " ".join(feedback.values()), sizes, lost_min_chars)
    return Features(
        family=t.family, stop_reason=t.stop_reason, error=t.error, n_turns=len(t.turns),
        finished=t.stop_reason == "submitted", calls=calls, context_chars=sizes,
        unrecovered_error_turns=unrecovered, recovered_error_turns=recovered,
        schema_turns=sorted({c.turn for c in calls if c.ok and c.schema_problem}),
        blocked_valid_turns=sorted(set(blocked_valid)), loop_turns=_loops(calls, loop_n),
        requery_turns=_requeries(calls), dropped_items=dropped, dropped_turns=dropped_turns,
        page_gap_turns=_page_gaps(calls), unvisited_sources=unvisited,
        unmentioned_outputs=unmentioned, write_turns=sorted({c.turn for c in calls if c.ok and c.action == "write"}),
        failed_checks=failed, feedback=feedback, missing_literals=_missing_literals(calls, feedback),
    )
