"""The round's `report` stage: its records -> `<round>/reports/report.md` (+ PNGs) and the run summary.

Numbers come from the stored rollouts the records point to (read back from Parquet), never from memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from analysis.report_sections import ReportSection, write_section_plots
from analysis.round_report import MAIN_ROWS, RoundPage, round_markdown
from flows.round.context import RoundContext
from flows.round.data import ArmDataRecord
from flows.round.eval import EvalRecord
from flows.round.gate import GateRecord
from flows.round.report_rows import row_views
from flows.round.rows import rows_frame
from flows.round.stages import PAIRS_PREFIX, AttributeRecord, EvolveRecord, grouped
from flows.plan import harness_for
from flows.provenance import describe
from flows.store import atomic_write_text
from harness import baseline
from harness.diffs import diff

SIMULATED = ("flawed/", "showwork/")


class ReportRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    report_path: str
    rows: list[dict[str, str]]
    plots: dict[str, str]
    markdown: str
    pass_k: list[dict[str, Any]] = Field(default_factory=list, description="pass@1 / pass@k / pass^k per row, family "
                                         "(CIs): the report's table, also a Prefect table artifact.")
    row_costs: list[dict[str, Any]] = Field(default_factory=list, description="Cost per row (API dollars, "
                                            "model-seconds, wall seconds per rollout).")


def test_frame(ctx: RoundContext, tests: dict[str, EvalRecord]) -> pl.DataFrame:
    """One row per test rollout of the round (flows/round/rows.py)."""
    return rows_frame(ctx.store, tests)


def _notes(ctx: RoundContext, tests: dict[str, EvalRecord]) -> list[str]:
    notes = [f"Stopped after the search: {ctx.stopped}."] if ctx.stopped else []
    models = {r.model for r in tests.values()}
    if ctx.r.uses_roles:
        models |= {ctx.expert().model, ctx.student().model, ctx.r.correction.locator_expert,
                   ctx.correction_expert().model}
    sim = sorted(m for m in models if m.startswith(SIMULATED))
    if sim:
        notes.append(f"SIMULATED: {', '.join(sim)} is a simulated policy (flawed/: the oracle with labelled, injected "
                     "faults; showwork/: the show-your-work policy the student learned from, knowing every item); its "
                     "rows are not a model's results.")
    if ctx.r.uses_roles and ctx.correction_expert().model != ctx.expert().model:
        notes.append(f"The correction arm's rewrites come from {ctx.correction_expert().model}, imitation and "
                     f"evaluation from {ctx.expert().model}: an expert asked to solve writes its own plan; asked to "
                     "repair one turn, it should repair it in the student's form.")
    if ctx.r.search.reflector == "library" and "evolve" in ctx.r.stages:
        notes.append("The library reflector draws on per-family knowledge cards that share keys with the flawed "
                     "policy's knowledge items: the search here tests the machinery, not the method.")
    return notes


KEEP_RULES = {"controlled": "a correction is kept only when the student's decision replays of it (seeds the selection "
                            "did not use) beat the control, its own turn t* resampled from the same prefix with the "
                            "same seeds",
              "improved": "a correction is kept only when the student's replays of it beat the failing rollout's score",
              "any": "every chosen candidate is kept"}


def _corrections(ctx: RoundContext, data: ArmDataRecord | None) -> tuple[list[dict[str, Any]], str]:
    """The correction arm's yield table and a line on its keep rule, the kept rate with and without the control
    (or why it has no set), and the self arm's rows."""
    arm = data.sets.get("corr") if data is not None else None
    if arm is None:
        return [], ""
    c = ctx.r.correction
    note = (f"Rewrites by {ctx.correction_expert().model}; locator {c.locator}, selector {c.selector}; keep "
            f"'{c.keep}' ({KEEP_RULES[c.keep]}), row suffix '{c.suffix}', loss on '{c.loss_on}'; {arm.rows} rows in "
            "the set.")
    card = arm.card.get("correction_card", arm.card)
    rate = card.get("kept_rate") if isinstance(card, dict) else None
    if rate and rate.get("decided"):
        note += (f" Kept {rate['kept']} of the {rate['decided']} corrections that reached the keep decision "
                 f"({100 * rate['kept'] / rate['decided']:.1f}%); without the control (the chosen candidate's replays "
                 f"above the failing rollout's score) {rate['kept_without_control']} "
                 f"({100 * rate['kept_without_control'] / rate['decided']:.1f}%).")
    own = data.sets.get("self") if data is not None else None
    if own is not None:
        note += f" The self arm trains on the set's {own.rows} own successes alone." if own.rows else \
            f" The self arm has no set: {own.reason}."
    return list(arm.card.get("yield", [])), note + (f" {arm.reason}" if arm.reason else "")


def _harness_views(ctx: RoundContext, evolved: EvolveRecord | None) -> tuple[dict[str, list[str]], dict[str, str]]:
    """The families whose h*_t is h0 / the start harness (their harness comparisons are not tested), and the diff
    from the start harness to h*_t per family (when the round searched)."""
    if evolved is None:
        return {}, {}
    same: dict[str, list[str]] = {"h0": [], "hstart": []}
    diffs: dict[str, str] = {}
    for fam, found in evolved.families.items():
        start = harness_for(ctx.state.start_harness, fam, ctx.base)
        h_star = harness_for(evolved.h_star_dir, fam, ctx.base)
        if h_star.id == baseline(fam).id:
            same["h0"].append(fam)
        if h_star.id == start.id:
            same["hstart"].append(fam)
        diffs[fam] = diff(start, h_star)
    return same, diffs


def build_report(ctx: RoundContext, tests: dict[str, EvalRecord], evolved: EvolveRecord | None,
                 attributed: AttributeRecord | None, gate: GateRecord | None, stages: list[dict[str, Any]],
                 data: ArmDataRecord | None = None) -> ReportRecord:
    """The round's page; a stage the round did not run (`round.stages`) leaves its section saying so."""
    frame = test_frame(ctx, tests)
    families = evolved.families if evolved is not None else {}
    edits = [{"family": f, **{k: v for k, v in e.items() if k in ("op", "rationale", "val_mean", "in_h_star")}}
             for f, s in families.items() for e in s.accepted_edits]
    search = [{"family": f, "h0 val": f"{s.h0_val:.3f}", "h* val": f"{s.best_val:.3f}", "h*": s.h_star_id,
               "evaluations run": s.evaluations_run, "cached": s.evaluations_cached} for f, s in families.items()]
    ev = ctx.config.evaluation
    corrections, corrections_note = _corrections(ctx, data)
    same_harness, harness_diffs = _harness_views(ctx, evolved)
    page = RoundPage(
        title=f"Co-evolution round {ctx.t}: {ctx.store.root.parent.parent.name}",
        meta={"M_t": ctx.state.student_model, "expert": ctx.expert().model if ctx.r.uses_roles else "-",
              "start harness": ctx.state.start_harness,
              "families": ", ".join(ctx.families()), "test split": f"{ev.split}, {ev.n_instances or 'all'} instances x "
              f"{ev.seeds} seeds, students sampled at T={ctx.r.temperature}",
              "training seeds": ctx.config.lora.seeds if ctx.config.trains else "-",
              "attributor": attributed.attributor if attributed is not None else "-",
              "stages": ", ".join(ctx.r.stages), "code": describe(ctx.store.root.parent.parent)},
        frame=frame, sections=[(s.title, s.markdown) for s in attributed.sections] if attributed is not None else [],
        edits=edits, search=search, gate=gate.model_dump() if gate is not None else {}, stages=stages,
        pairs=[(n, rec.label) for n, rec in tests.items() if n.startswith(PAIRS_PREFIX)],
        notes=_notes(ctx, tests), n_boot=ev.bootstrap_samples, corrections=corrections,
        corrections_note=corrections_note, same_harness=same_harness, harness_diffs=harness_diffs)
    out = ctx.store.root / "reports"
    views = row_views(ctx.store.root.parent.parent, ctx.t, frame, [*MAIN_ROWS, *page.pairs], out, ev.bootstrap_samples)
    page = page.model_copy(update={"row_sections": views.row_sections, "closing": views.closing})
    md = round_markdown(page)
    sections = [ReportSection(**s.model_dump()) for s in attributed.sections] if attributed is not None else []
    order = list(grouped(tests))
    plots = {**views.plots, **{k: str(v) for k, v in write_section_plots(sections, out, order).items()}}
    path = out / "report.md"
    atomic_write_text(path, md)
    from analysis.round_report import main_table

    return ReportRecord(report_path=str(path.resolve()), rows=main_table(frame, page.pairs), plots=plots, markdown=md,
                        pass_k=views.pass_k, row_costs=views.row_costs)


def write_summary(run_root: Path, rounds: list[dict[str, Any]]) -> Path:
    """`<run>/reports/summary.md`: one line per round (student, decision) with a link to its page."""
    lines = ["# Run summary", "", "| round | M_t | decision | report |", "|---|---|---|---|"]
    for r in rounds:
        lines.append(f"| {r['t']} | {r['student']} | {r['decision']} | {r['report']} |")
    path = run_root / "reports" / "summary.md"
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path
