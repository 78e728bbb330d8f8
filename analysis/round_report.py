"""One page per co-evolution round: the paper's main table and what explains it.

    md = round_markdown(RoundPage(...))

- Main table per family, success % mean +- SEM: M_t h0, M_t h*, expert h0, expert h*, imitation h0, imitation h*,
  correction h*. Base rows: SEM over evaluation seeds. Trained arms: each training seed's success rate (over its
  evaluation seeds), then mean +- SEM over training seeds.
- Paired deltas with two-level bootstrap CIs (analysis/stats.py `two_level_bootstrap`): instances and each arm's
  training seeds resampled; the delta of an arm is the mean over its training seeds, and `units` counts
  (instance, evaluation seed) once. A harness comparison whose two harnesses are the same (h* = h0: the search
  accepted no edit) is "not tested".
- The sections over the rows (`row_sections`, made by analysis/report.py): pass@1, pass@k and pass^k with CIs, the
  cost of each row, the success and success-vs-cost plots.
- The attribution sections (composition shift, trigger heatmap, fit table), the accepted harness edits, the
  promotion gate's decision and evidence, cost and wall time per stage (API dollars, model-seconds, rollouts and
  the correction stage's cost per kept correction), then `closing` (the campaign across the run's rounds).
The frame: one row per test rollout with `group` (row key), `train_seed` (null for base rows), `family`,
`instance_id`, `seed` (evaluation seed), `passed`.
"""

from __future__ import annotations

from typing import Any

from collections.abc import Sequence

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from analysis.report import markdown_table, stage_cost_markdown
from analysis.stats import OVERALL, family_table, fmt_mean_sem, two_level_bootstrap

MAIN_ROWS: list[tuple[str, str]] = [
    ("M_t.h0", "M_t on h0"), ("M_t.hstar", "M_t on h*"), ("expert.h0", "expert on h0"), ("expert.hstar", "expert on h*"),
    ("imit_h0.h0", "imitation on h0"), ("imit.hstar", "imitation on h*"), ("corr.hstar", "correction on h*"),
    ("self.hstar", "self-training on h*"), ("M_t.hstart", "M_t on h*_{t-1}")]
OPTIONAL_ROWS = {"M_t.hstart"}  # shown only when the round ran it (from round 1 on)
DELTAS: list[tuple[str, str, str]] = [
    ("expert.h0", "M_t.h0", "expert headroom on h0 (expert h0 - M_t h0)"),
    ("M_t.hstar", "M_t.h0", "evolved harness (M_t h* - h0)"),
    ("expert.hstar", "expert.h0", "expert gains on h* (expert h* - h0)"),
    ("imit_h0.h0", "M_t.h0", "imitation under h0 (imit h0 - M_t h0)"),
    ("imit.hstar", "M_t.hstar", "imitation under h* (imit h* - M_t h*)"),
    ("corr.hstar", "M_t.hstar", "correction under h* (corr h* - M_t h*)"),
    ("corr.hstar", "imit.hstar", "correction vs imitation (corr h* - imit h*)"),
    ("corr.hstar", "self.hstar", "correction vs self-training (corr h* - self h*: what the corrections add)"),
    ("M_t.hstar", "M_t.hstart", "this round's search (M_t h*_t - M_t h*_{t-1})")]
# harness comparisons: the reference harness each compares h*_t with (RoundPage.same_harness)
HARNESS_DELTAS = {("M_t.hstar", "M_t.h0"): "h0", ("expert.hstar", "expert.h0"): "h0",
                  ("M_t.hstar", "M_t.hstart"): "hstart"}


class RoundPage(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    title: str
    meta: dict[str, Any] = Field(default_factory=dict)
    frame: Any = Field(description="pl.DataFrame of the test rollouts (see the module docstring).")
    sections: list[tuple[str, str]] = Field(default_factory=list, description="(title, markdown) attribution sections.")
    edits: list[dict[str, Any]] = Field(default_factory=list)
    search: list[dict[str, Any]] = Field(default_factory=list, description="Per family: h0 -> h* validation means.")
    gate: dict[str, Any] = Field(default_factory=dict)
    corrections: list[dict[str, Any]] = Field(default_factory=list, description="The correction arm's yield per "
                                              "family and locator (correction.records.correction_yield).")
    corrections_note: str = Field(default="", description="The keep rule, or why the arm has no set.")
    pairs: list[tuple[str, str]] = Field(default_factory=list, description="(group, label) of the configured "
                                         "pairs evaluated beside the round's own (`evaluate_pairs`), in order.")
    stages: list[dict[str, Any]] = Field(default_factory=list, description="Per stage: status, wall s, cost USD.")
    notes: list[str] = Field(default_factory=list)
    n_boot: int = 2000
    same_harness: dict[str, list[str]] = Field(default_factory=dict, description="'h0' / 'hstart' -> the families "
                                               "whose h*_t is that harness (their harness comparisons: not tested).")
    harness_diffs: dict[str, str] = Field(default_factory=dict, description="Family -> the diff from the start "
                                          "harness to h*_t (harness/diffs.py; '' when unchanged).")
    row_sections: list[tuple[str, str]] = Field(default_factory=list, description="(title, markdown) after the "
                                                "paired deltas: pass@k, cost per row, plots (analysis/report.py).")
    closing: list[tuple[str, str]] = Field(default_factory=list, description="(title, markdown) at the end of the "
                                           "page: the campaign across the run's rounds (analysis/campaign.py).")


def main_table(frame: pl.DataFrame, pairs: Sequence[tuple[str, str]] = ()) -> list[dict[str, str]]:
    """Rows in MAIN_ROWS order (every row present; '–' where it did not run), then the configured `pairs`
    (group, label); columns = families + overall. Only `pairs` when none of the round's own rows ran."""
    present = set(frame["group"].unique().to_list()) if frame.height else set()
    table_in = frame.with_columns(pl.coalesce(pl.col("train_seed"), pl.col("seed")).alias("seed")) if frame.height else frame
    long = family_table(table_in, group="group") if frame.height else pl.DataFrame()
    fams = sorted(set(frame["family"].to_list())) + [OVERALL] if frame.height else [OVERALL]
    rows = []
    own = [] if pairs and not present & {k for k, _ in MAIN_ROWS} else MAIN_ROWS
    for key, label in [*own, *pairs]:
        if key in OPTIONAL_ROWS and key not in present:
            continue
        row = {"row": label}
        for f in fams:
            hit = long.filter((pl.col("group") == key) & (pl.col("family") == f)) if key in present else pl.DataFrame()
            row[f] = fmt_mean_sem(hit["mean"][0], hit["sem"][0]) if hit.height else "–"
        rows.append(row)
    return rows


def _untested(a: str, b: str, family: str, fams: list[str], same: dict[str, list[str]]) -> bool:
    """Whether this harness comparison compares a harness with itself for `family` (overall: for every family)."""
    ref = HARNESS_DELTAS.get((a, b))
    hit = set(same.get(ref, [])) if ref else set()
    return family in hit or (family == OVERALL and bool(hit) and hit >= set(fams) - {OVERALL})


def delta_rows(frame: pl.DataFrame, n_boot: int,
               same_harness: dict[str, list[str]] | None = None) -> list[dict[str, str]]:
    present = set(frame["group"].unique().to_list()) if frame.height else set()
    fams = sorted(set(frame["family"].to_list())) + [OVERALL] if frame.height else []
    rows = []
    for a, b, label in DELTAS:
        if a not in present or b not in present:
            if not {a, b} & OPTIONAL_ROWS:
                rows.append({"comparison": label, "family": "all", "diff (pp)": "–", "95% CI (pp)": "not run"})
            continue
        for f in fams:
            d = two_level_bootstrap(frame, a, b, group="group", seed_col="train_seed", family=f, n_boot=n_boot)
            ci = f"[{100 * d.ci_low:+.1f}, {100 * d.ci_high:+.1f}]" + (" *" if d.significant else "")
            if _untested(a, b, f, fams, same_harness or {}):
                ci = "not tested (the same harness on both sides: the search accepted no edit)"
            seeds = f", {d.seeds_a} vs {d.seeds_b} training seeds" if max(d.seeds_a, d.seeds_b) > 1 else ""
            rows.append({"comparison": label, "family": f, "diff (pp)": f"{100 * d.diff:+.1f}", "95% CI (pp)": ci,
                         "units": f"{d.n_units} ({d.n_instances} instances{seeds})"})
    return rows


def _gate_md(gate: dict[str, Any]) -> str:
    if not gate:
        return "_(the gate has not run)_\n"
    lines = [f"**{gate.get('reason', '')}**", ""]
    for k in ("candidate", "best_seed", "seed_choice", "seed_means", "instances", "val", "diff", "fit", "merged_dir",
              "next_student"):
        if gate.get(k) not in (None, "", {}, []):
            lines.append(f"- {k}: `{gate[k]}`")
    return "\n".join(lines) + "\n"


def round_markdown(page: RoundPage) -> str:
    frame: pl.DataFrame = page.frame
    parts = [f"# {page.title}\n"]
    parts += [f"- {k}: {v}" for k, v in page.meta.items()]
    parts += ["", *[f"> {n}" for n in page.notes], ""]
    parts += ["## Main table (success %, mean ± SEM)\n",
              "Base rows: SEM over evaluation seeds; trained arms: SEM over training seeds.\n",
              markdown_table(main_table(frame, page.pairs)),
              "\n## Paired deltas (bootstrap over instances and training seeds; * = CI excludes 0)\n",
              markdown_table(delta_rows(frame, page.n_boot, page.same_harness))]
    parts += [f"\n## {title}\n\n{md}" for title, md in page.row_sections]
    parts += ["\n## Harness search (validation mean h0 -> h*)\n",
              markdown_table(page.search or [{"search": "(the harness search did not run in this round)"}]),
              "\n## Accepted harness edits\n", markdown_table(page.edits or [{"edit": "(none accepted)"}])]
    if page.harness_diffs:
        parts += ["\n## Harness change (start harness -> h*_t)\n",
                  *(f"- {fam}: " + (f"\n\n```\n{d}\n```\n" if d else "unchanged")
                    for fam, d in page.harness_diffs.items())]
    parts += ["\n## Correction data (train split)\n", page.corrections_note,
              markdown_table(page.corrections or [{"corrections": "(the correction arm did not run)"}])]
    parts += [f"\n## {title}\n\n{md}" for title, md in page.sections]
    kept = sum(int(r.get("kept") or 0) for r in page.corrections)
    parts += ["\n## Promotion gate\n", _gate_md(page.gate), "\n## Cost and wall time per stage\n",
              stage_cost_markdown(page.stages, kept or None)]
    parts += [f"\n## {title}\n\n{md}" for title, md in page.closing]
    return "\n".join(parts) + "\n"
