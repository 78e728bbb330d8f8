"""The component library: failure evidence -> candidate edits, each with a weight and the evidence it cites.

Each rule reads the parent harness, the minibatch's rollouts and the family's knowledge card, and suggests
edits from one kind of component:

| rule              | evidence (in failing rollouts)                                  | edit                          |
|-------------------|------------------------------------------------------------------|-------------------------------|
| `harmful_hooks`   | a hook blocked a call or stopped the episode                     | remove_hook                   |
| `hidden_tools`    | the model called a tool the harness hides                        | expose_tool                   |
| `loop_guard`      | the same call (name + arguments) 3+ times                        | add_hook repeated_call/inject |
| `tool_error_guard`| 3+ tool errors in one rollout                                    | add_hook after_tool_error     |
| `require_outputs` | finished without the card's output tool; its checks failed        | add_hook on_finish/require    |
| `context_policy`  | context overflow or very long tool results                       | set_context_policy            |
| `tool_examples`   | a tool's calls failed while another call of it succeeded          | set_tool_examples             |
| `hide_unused`     | exposed tools no rollout called (never the card's needed tools)   | hide_tool                     |
| `knowledge`       | failed checks that a card item explains, item not yet stated       | insert_section (domain_recipe)|
| `paging_tool`     | a paged tool (`page` argument, result says `"pages": N`) read on   | add_composite_tool (every     |
|                   | fewer than N pages                                               | page in one call)             |

Weights grow with the number of failing rollouts that show the evidence; harness-caused failures (a hook or
a hidden tool in the way) weigh most. Pure functions: no randomness here (the reflector draws).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

from harness.composite import AddCompositeTool, CompositeStep, CompositeTool, Param
from harness.edits import (AddHook, ExposeTool, HarnessEdit, HideTool, InsertSection, RemoveHook, SetContextPolicy,
                           SetToolExamples)
from harness.evolution.cards import KnowledgeCard, section_id
from harness.evolution.records import ReflectiveDataset, RolloutResult
from harness.hooks import AfterToolError, Hook, Inject, OnFinish, RepeatedCall, Require
from harness.program import Harness, PromptSection

LONG_RESULT_CHARS = 12_000
TRUNCATE_TO = 6_000
WINDOW_TURNS = 12
MAX_EXAMPLE_CHARS = 300


class Suggestion(BaseModel):
    """A candidate edit: `target` is the component it touches (one edit per target per proposal)."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    rule: str
    target: str
    edit: HarnessEdit
    rationale: str
    weight: float


Rule = Callable[[Harness, ReflectiveDataset, KnowledgeCard | None], list[Suggestion]]


def _share(n: int, ds: ReflectiveDataset) -> str:
    return f"{n} of {len(ds.failures)} failing rollouts"


def harmful_hooks(h: Harness, ds: ReflectiveDataset, card: KnowledgeCard | None) -> list[Suggestion]:
    hits: Counter[str] = Counter()
    for r in ds.failures:
        hits.update({t.component.removeprefix("hook:") for t in r.triggers
                     if t.kind == "hook" and ("->block" in t.detail or "->stop" in t.detail)})
    return [Suggestion(rule="harmful_hooks", target=f"hook:{hid}", edit=RemoveHook(id=hid), weight=10.0 + 2 * n,
                       rationale=f"hook '{hid}' blocked calls or stopped the episode in {_share(n, ds)}")
            for hid, n in sorted(hits.items()) if h.hook(hid) is not None]


def hidden_tools(h: Harness, ds: ReflectiveDataset, card: KnowledgeCard | None) -> list[Suggestion]:
    hits = Counter(c.name for r in ds.failures for c in r.calls if c.name in h.tools.hidden)
    return [Suggestion(rule="hidden_tools", target=f"tool:{name}", edit=ExposeTool(tool=name), weight=10.0 + 2 * n,
                       rationale=f"the model called the hidden tool '{name}' {n} times in failing rollouts")
            for name, n in sorted(hits.items())]


def _repeats(r: RolloutResult) -> int:
    counts = Counter((c.name, c.arguments) for c in r.calls)
    return max(counts.values(), default=0)


def loop_guard(h: Harness, ds: ReflectiveDataset, card: KnowledgeCard | None) -> list[Suggestion]:
    if any(isinstance(x.when, RepeatedCall) for x in h.hooks):
        return []
    looping = [r for r in ds.failures if _repeats(r) >= 3]
    if not looping:
        return []
    hook = Hook(id="guard-repeated-call", when=RepeatedCall(n=3), max_fires=2,
                then=Inject(message="You already made this exact call and have its answer above. Use that answer; "
                                    "do not repeat the call - take the next step of the task instead."),
                note="library: loop guard")
    return [Suggestion(rule="loop_guard", target="hook:guard-repeated-call", edit=AddHook(hook=hook),
                       weight=2.0 + len(looping),
                       rationale=f"the same call was repeated 3+ times in {_share(len(looping), ds)}")]


def tool_error_guard(h: Harness, ds: ReflectiveDataset, card: KnowledgeCard | None) -> list[Suggestion]:
    if any(isinstance(x.when, AfterToolError) for x in h.hooks):
        return []
    erring = [r for r in ds.failures if sum(c.is_error and not c.blocked for c in r.calls) >= 3]
    if not erring:
        return []
    hook = Hook(id="guard-tool-error", when=AfterToolError(), max_fires=3,
                then=Inject(message="That tool call failed. Read the error message, fix the arguments (names, types, "
                                    "paths) and try again; do not send the same call unchanged."),
                note="library: tool error guard")
    return [Suggestion(rule="tool_error_guard", target="hook:guard-tool-error", edit=AddHook(hook=hook),
                       weight=1.0 + len(erring), rationale=f"3+ tool calls failed in {_share(len(erring), ds)}")]


def require_outputs(h: Harness, ds: ReflectiveDataset, card: KnowledgeCard | None) -> list[Suggestion]:
    out = []
    for req in card.outputs if card else []:
        hid = f"require-{req.id}"
        if h.hook(hid) is not None:
            continue
        missing = [r for r in ds.failures if r.stop_reason == "submitted"
                   and any(req.explains(c) for c in r.failed_checks)
                   and not any(re.fullmatch(req.tool, c.name) and not c.is_error for c in r.calls)]
        if missing:
            hook = Hook(id=hid, when=OnFinish(), then=Require(tool=req.tool, message=req.message), max_fires=2,
                        note=f"library: the task needs output '{req.id}'")
            out.append(Suggestion(rule="require_outputs", target=f"hook:{hid}", edit=AddHook(hook=hook),
                                  weight=2.5 + len(missing),
                                  rationale=f"{_share(len(missing), ds)} finished without a successful "
                                            f"{req.tool} call and failed {', '.join(req.checks)}"))
    return out


def context_policy(h: Harness, ds: ReflectiveDataset, card: KnowledgeCard | None) -> list[Suggestion]:
    overflow = [r for r in ds.failures if r.stop_reason == "context_overflow"]
    long = [r for r in ds.failures if any(c.result_chars > LONG_RESULT_CHARS for c in r.calls)]
    if h.context.max_tool_result_chars is None and (overflow or long):
        n = len({r.key for r in overflow + long})
        return [Suggestion(rule="context_policy", target="context",
                           edit=SetContextPolicy(changes={"max_tool_result_chars": TRUNCATE_TO}), weight=2.0 + n,
                           rationale=f"tool results over {LONG_RESULT_CHARS} characters or a context overflow in "
                                     f"{_share(n, ds)}: keep the head and tail of long results")]
    if overflow and h.context.keep_last_turns is None:
        return [Suggestion(rule="context_policy", target="context",
                           edit=SetContextPolicy(changes={"keep_last_turns": WINDOW_TURNS}), weight=2.0 + len(overflow),
                           rationale=f"context overflow in {_share(len(overflow), ds)} despite truncation: "
                                     f"send only the last {WINDOW_TURNS} turns")]
    return []


def _example(arguments: str) -> dict | None:
    if len(arguments) > MAX_EXAMPLE_CHARS:
        return None
    try:
        value = json.loads(arguments)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) and value else None


def tool_examples(h: Harness, ds: ReflectiveDataset, card: KnowledgeCard | None) -> list[Suggestion]:
    known = set(h.tools.descriptions) | set(h.tools.helpers)
    errors = Counter(c.name for r in ds.failures for c in r.calls
                     if c.is_error and not c.blocked and c.name in known and c.name not in h.tools.examples)
    out = []
    for name, n in sorted(errors.items()):
        good = [e for r in ds.records for c in r.calls if c.name == name and not c.is_error
                and (e := _example(c.arguments)) is not None]
        if good:
            out.append(Suggestion(rule="tool_examples", target=f"tool_examples:{name}",
                                  edit=SetToolExamples(tool=name, examples=[good[0]]), weight=1.0 + n,
                                  rationale=f"{n} calls of {name} failed in failing rollouts while "
                                            f"{json.dumps(good[0])} succeeded: show it as an example"))
    return out


def hide_unused(h: Harness, ds: ReflectiveDataset, card: KnowledgeCard | None) -> list[Suggestion]:
    exposed = [t for t in sorted(h.tools.descriptions) if t not in h.tools.hidden]
    called = {c.name for r in ds.records for c in r.calls}
    keep = set(card.needed_tools) if card else set()
    unused = [t for t in exposed if t not in called and t not in keep]
    if len(exposed) <= 4 or not ds.failures:
        return []
    return [Suggestion(rule="hide_unused", target=f"tool:{t}", edit=HideTool(tool=t), weight=0.5,
                       rationale=f"no rollout of the minibatch called '{t}'; fewer tools help a small model choose")
            for t in unused]


def knowledge(h: Harness, ds: ReflectiveDataset, card: KnowledgeCard | None) -> list[Suggestion]:
    out = []
    for item in card.items if card else []:
        sid = section_id(item.key)
        if h.section(sid) is not None:
            continue
        support = [r for r in ds.failures if any(item.explains(c) for c in r.failed_checks)]
        if support:
            checks = sorted({c for r in support for c in r.failed_checks if item.explains(c)})
            section = PromptSection(id=sid, kind="domain_recipe", title=item.title, text=item.text,
                                    use_pattern=item.use_pattern)
            out.append(Suggestion(rule="knowledge", target=f"section:{sid}", edit=InsertSection(section=section),
                                  weight=1.0 + len(support) / max(1, len(item.checks)),
                                  rationale=f"failed {', '.join(checks[:4])} in {_share(len(support), ds)}; "
                                            f"the convention '{item.key}' ({item.source}) explains them"))
    return out


_PAGES = re.compile(r'"pages"\s*:\s*(\d+)')


def _page_of(arguments: str) -> int | None:
    """The page of a call whose only argument is an integer `page`, else None."""
    args = _example(arguments)
    page = args.get("page") if args is not None and set(args) == {"page"} else None
    return page if isinstance(page, int) and not isinstance(page, bool) else None


def _skipped_pages(r: RolloutResult) -> dict[str, int]:
    """Paged tool -> pages it has, for the tools this rollout read on fewer pages than the listing reports."""
    out: dict[str, int] = {}
    for name in {c.name for c in r.calls}:
        calls = [c for c in r.calls if c.name == name and not c.is_error and _page_of(c.arguments) is not None]
        totals = [int(m.group(1)) for c in calls if (m := _PAGES.search(c.result_head))]
        if calls and totals and len({_page_of(c.arguments) for c in calls}) < max(totals):
            out[name] = max(totals)
    return out


def paging_tool(h: Harness, ds: ReflectiveDataset, card: KnowledgeCard | None) -> list[Suggestion]:
    skipped = Counter(name for r in ds.failures for name in _skipped_pages(r))
    out = []
    for name, n in sorted(skipped.items()):
        composite = f"{name}_all_pages"
        if h.composite(composite) is not None or composite in h.tools.known_tools():
            continue
        tool = CompositeTool(
            name=composite, description=f"Call {name} on page 1, 2, ..., pages and return every page in one answer. "
                                        f"Pass the page count that {name}'s first page reports.",
            parameters={"pages": Param(type="integer", description=f"How many pages {name} has.")},
            steps=[CompositeStep(tool=name, arguments={"page": "{i}"}, repeat="pages")])
        out.append(Suggestion(rule="paging_tool", target=f"composite:{composite}", edit=AddCompositeTool(tool=tool),
                              weight=1.0 + n, rationale=f"{_share(n, ds)} read {name} on fewer pages than it "
                                                        "reports: one call that reads every page"))
    return out


RULES: tuple[Rule, ...] = (harmful_hooks, hidden_tools, loop_guard, tool_error_guard, require_outputs,
                           context_policy, tool_examples, hide_unused, knowledge, paging_tool)


def suggestions(h: Harness, ds: ReflectiveDataset, card: KnowledgeCard | None) -> list[Suggestion]:
    """Every rule's suggestions, in rule order."""
    return [s for rule in RULES for s in rule(h, ds, card)]
