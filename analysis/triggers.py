"""Component trigger rates (the trigger-rate scan): how often each harness component fired, per pair.

A component fired in a rollout when
- a turn's `TurnRecord.triggers` carries its id (`hook:<id>`, `tool:<name>` for helper and composite tools,
  `context` for the context policy), or
- it is a prompt section `section:<id>` with a use pattern (`PromptSection.use_pattern`, an optional regex)
  that matches an assistant message's text or a tool call's arguments (as JSON).

rate(pair, component) = rollouts of the pair in which the component fired / rollouts of the pair whose
family has the component. Which families have a component: the `components` mapping (family -> component
ids, e.g. from each family's h*) when given; otherwise the families where it fired in any pair.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import polars as pl

from agents.records import Trajectory

TRIGGER_SCHEMA: dict[str, pl.DataType] = {
    "pair": pl.String(), "component": pl.String(), "fired": pl.Int64(), "rollouts": pl.Int64(), "rate": pl.Float64(),
}


def use_patterns_of(harness: Any) -> dict[str, str]:
    """Section id -> use pattern, for the sections of `harness` that declare one (attribute `use_pattern`)."""
    return {s.id: s.use_pattern for s in getattr(harness, "sections", []) if getattr(s, "use_pattern", None)}


def _model_text(t: Trajectory) -> list[str]:
    out = []
    for turn in t.turns:
        content = turn.assistant.get("content")
        if isinstance(content, str) and content:
            out.append(content)
        out += [json.dumps(c.arguments) if isinstance(c.arguments, dict) else c.arguments for c in turn.tool_calls]
    return out


def section_uses(t: Trajectory, patterns: Mapping[str, str]) -> set[str]:
    """`section:<id>` for each section whose pattern matches what the model wrote (text or call arguments)."""
    texts = _model_text(t)
    used = set()
    for sid, pattern in patterns.items():
        rx = re.compile(pattern)
        if any(rx.search(x) for x in texts):
            used.add(f"section:{sid}")
    return used


def fired_components(t: Trajectory, patterns: Mapping[str, str] | None = None) -> set[str]:
    """Every component that fired in one rollout."""
    fired = {trig.component_id for turn in t.turns for trig in turn.triggers}
    return fired | (section_uses(t, patterns) if patterns else set())


def trigger_rates(by_pair: Mapping[str, Sequence[Trajectory]], *,
                  components: Mapping[str, Sequence[str]] | None = None,
                  use_patterns: Mapping[str, Mapping[str, str]] | None = None) -> pl.DataFrame:
    """(pair, component, fired, rollouts, rate) for every component, side by side across pairs.

    `use_patterns`: family -> (section id -> regex). `components`: family -> component ids (module docstring).
    """
    fired: dict[str, list[tuple[str, set[str]]]] = {}
    where: dict[str, set[str]] = defaultdict(set)
    for pair, trajs in by_pair.items():
        fired[pair] = [(t.family, fired_components(t, (use_patterns or {}).get(t.family))) for t in trajs]
        for family, comps in fired[pair]:
            for c in comps:
                where[c].add(family)
    if components is not None:
        where = defaultdict(set)
        for family, comps in components.items():
            for c in comps:
                where[c].add(family)
    rows = []
    for comp in sorted(where):
        for pair, items in fired.items():
            relevant = [comps for family, comps in items if family in where[comp]]
            n = sum(comp in comps for comps in relevant)
            rows.append({"pair": pair, "component": comp, "fired": n, "rollouts": len(relevant),
                         "rate": n / len(relevant) if relevant else float("nan")})
    return pl.DataFrame(rows, schema=TRIGGER_SCHEMA)


def trigger_markdown(table: pl.DataFrame, order: Sequence[str]) -> str:
    """Rows = components, columns = pairs, cells 'rate% (fired/rollouts)'."""
    if table.is_empty():
        return "_No harness component fired in any rollout (h0 has no hooks, helpers or context policy)._\n"
    cells = {(r["pair"], r["component"]): r for r in table.iter_rows(named=True)}
    lines = ["| component | " + " | ".join(order) + " |", "|---|" + "---|" * len(order)]
    for comp in sorted(table["component"].unique().to_list()):
        row = [cells.get((p, comp)) for p in order]
        lines.append(f"| {comp} | " + " | ".join(
            "–" if r is None or r["rollouts"] == 0 else f"{100 * r['rate']:.1f} ({r['fired']}/{r['rollouts']})"
            for r in row) + " |")
    return "\n".join(lines) + "\n"
