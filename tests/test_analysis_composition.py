"""Failure composition (bootstrap CIs, shift), component trigger rates, and the report sections they make."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import polars as pl
import pytest
from attribution_helpers import oracle_run

import harness as harness_pkg
from agents.records import Trajectory
from analysis.composition import composition_markdown, composition_shift, composition_table, shift_markdown
from analysis.report_sections import composition_section, fit_section, trigger_section, write_section_plots
from analysis.triggers import fired_components, section_uses, trigger_rates, use_patterns_of
from harness.context import ContextPolicy
from harness.hooks import BeforeToolCall, Hook, Inject
from harness.program import PromptSection


def attr_frame(pairs: dict[str, list[str]]) -> pl.DataFrame:
    """One failure per instance: pair -> categories in instance order."""
    rows = [{"pair": p, "instance_id": f"f/{i}", "category": c, "attributor": "heuristic"}
            for p, cats in pairs.items() for i, c in enumerate(cats)]
    return pl.DataFrame(rows)


def test_composition_shares_and_ci() -> None:
    frame = attr_frame({"base": ["planning"] * 6 + ["implicit_knowledge"] * 4})
    table = composition_table(frame, random.Random(0), n_boot=500)
    rows = {r["category"]: r for r in table.iter_rows(named=True)}
    assert rows["planning"]["share"] == pytest.approx(0.6) and rows["planning"]["failures"] == 10
    assert 0.0 <= rows["planning"]["ci_low"] < 0.6 < rows["planning"]["ci_high"] <= 1.0
    assert rows["tool_use"]["share"] == 0.0 and rows["tool_use"]["ci_high"] == 0.0
    assert sum(r["share"] for r in rows.values()) == pytest.approx(1.0)
    again = composition_table(frame, random.Random(0), n_boot=500)
    assert again.equals(table)  # the seeded rng makes it reproducible
    md = composition_markdown(table, ["base"])
    assert "| planning | 60.0 [" in md and "| failures | 10 |" in md and "tool_use" not in md
    with pytest.raises(ValueError, match="unknown categories"):
        composition_table(attr_frame({"x": ["vibes"]}), random.Random(0))


def test_instances_move_together_in_the_bootstrap() -> None:
    # two instances, each failing 5 times in one category: the CI spans the cluster-level extremes 0 and 1
    rows = [{"pair": "p", "instance_id": f"f/{i // 5}", "category": "planning" if i < 5 else "tool_use",
             "attributor": "h"} for i in range(10)]
    r = composition_table(pl.DataFrame(rows), random.Random(1), n_boot=400).filter(pl.col("category") == "planning")
    assert (r["ci_low"][0], r["ci_high"][0]) == (0.0, 1.0)


def test_composition_shift() -> None:
    frame = attr_frame({"base": ["planning"] * 20 + ["implicit_knowledge"] * 20,
                        "imit": ["planning"] * 32 + ["implicit_knowledge"] * 8})
    shift = {r["category"]: r for r in composition_shift(frame, "base", "imit", random.Random(0), n_boot=500).iter_rows(named=True)}
    p = shift["planning"]
    assert p["shift"] == pytest.approx(0.3) and 0.0 < p["ci_low"] < 0.3 < p["ci_high"]
    assert shift["implicit_knowledge"]["shift"] == pytest.approx(-0.3)
    assert "| planning | 50.0 | 80.0 | +30.0 |" in shift_markdown(composition_shift(frame, "base", "imit", random.Random(0), n_boot=200))
    with pytest.raises(ValueError, match="no failures"):
        composition_shift(frame, "base", "missing", random.Random(0))


@pytest.fixture(scope="module")
def hooked() -> dict[str, list[Trajectory]]:
    """The real oracle under h0 and under a harness whose hook fires on every listing call."""
    h0 = harness_pkg.baseline("stock_alert")
    hook = Hook(id="remind", when=BeforeToolCall(tool="list_products"), then=Inject(message="Read every page."))
    recipe = PromptSection(id="recipe", kind="domain_recipe", text="Low stock means at or below the bound.")
    h1 = h0.model_copy(update={"hooks": [hook], "sections": [*h0.sections, recipe],
                               "context": ContextPolicy(max_tool_result_chars=1000)})

    async def build() -> dict[str, list[Trajectory]]:
        return {"h0": [await oracle_run("stock_alert", i) for i in (40, 41)],
                "h1": [await oracle_run("stock_alert", i, h1) for i in (40, 41)]}
    return asyncio.run(build())


def test_trigger_rates(hooked: dict[str, list[Trajectory]]) -> None:
    t = hooked["h1"][1]
    assert t.passed and all(x.passed for x in hooked["h0"])
    assert {"hook:remind", "context"} <= fired_components(t)
    assert section_uses(t, {"recipe": r"reorder level \d+", "never": r"zzz-no-such"}) == {"section:recipe"}
    table = trigger_rates(hooked, use_patterns={"stock_alert": {"recipe": r"reorder level \d+"}})
    rate = {(r["pair"], r["component"]): (r["fired"], r["rollouts"]) for r in table.iter_rows(named=True)}
    assert rate[("h1", "hook:remind")] == (2, 2) and rate[("h0", "hook:remind")] == (0, 2)
    assert rate[("h0", "section:recipe")] == (2, 2)  # a pattern detects use whether or not the section is there
    declared = trigger_rates(hooked, components={"stock_alert": ["hook:remind", "tool:notes"]})
    assert set(declared["component"].to_list()) == {"hook:remind", "tool:notes"}
    assert declared.filter(pl.col("component") == "tool:notes")["rate"].to_list() == [0.0, 0.0]
    assert use_patterns_of(harness_pkg.baseline("stock_alert")) == {}


def test_report_sections_and_their_plots(hooked: dict[str, list[Trajectory]], tmp_path: Path) -> None:
    assert "| hook:remind | 0.0 (0/2) | 100.0 (2/2) |" in trigger_section(hooked, ["h0", "h1"]).markdown
    attrs = attr_frame({"h0": ["planning", "tool_use"], "h1": ["planning", "planning"]})
    sections = [composition_section(attrs, ["h0", "h1"], random.Random(0), shifts=[("h0", "h1")], n_boot=200),
                trigger_section(hooked, ["h0", "h1"]), fit_section(hooked, base="h0")]
    assert [s.title for s in sections] == ["Failure composition", "Component trigger rates", "Model-harness fit"]
    assert "Shift `h0` -> `h1`" in sections[0].markdown
    paths = write_section_plots(sections, tmp_path / "out", ["h0", "h1"])
    for key in ("composition", "triggers"):
        assert paths[key].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"