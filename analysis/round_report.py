"""One page per co-evolution round: the paper's main table and what explains it.

    md = round_markdown(RoundPage(...))

- Main table per family, success % mean +- SEM: M_t h0, M_t h*, expert h0, expert h*, imitation h0, imitation h*,
  correction h*. Base rows: SEM over evaluation seeds. Trained arms: each training seed's success rate (over its
  evaluation seeds), then mean +- SEM over training seeds.
- Paired deltas with cluster-bootstrap CIs over instances (analysis/stats.py `paired_bootstrap`); an arm's units
  pool its training seeds, so the delta is the mean over training seeds.
- The attribution sections (composition shift, trigger heatmap, fit table), the accepted harness edits, the
  promotion gate's decision and evidence, cost and wall time per stage.
The frame: one row per test rollout with `group` (row key), `train_seed` (null for base rows), `family`,
`instance_id`, `seed` (evaluation seed), `passed`.
"""

from __future__ import annotations

from typing import Any

from collections.abc import Sequence

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from analysis.report import markdown_table
from analysis.stats import OVERALL, family_table, fmt_mean_sem, paired_bootstrap

MAIN_ROWS: list[tuple[str, str]] = [
    ("M_t.h0", "M_t on h0"), ("M_t.hstar", "M_t on h*"), ("expert.h0", "expert on h0"), ("expert.hstar", "expert on h*"),
    ("imit_h0.h0", "imitation on h0"), ("imit.hstar", "imitation on h*"), ("corr.hstar", "correction on h*")]
DELTAS: list[tuple[str, str, str]] = [
    ("expert.h0", "M_t.h0", "expert headroom on h0 (expert h0 - M_t h0)"),
    ("M_t.hstar", "M_t.h0", "evolved harness (M_t h* - h0)"),
    ("expert.hstar", "expert.h0", "expert gains on h* (expert h* - h0)"),
    ("imit_h0.h0", "M_t.h0", "imitation under h0 (imit h0 - M_t h0)"),
    ("imit.hstar", "M_t.hstar", "imitation under h* (imit h* - M_t h*)"),
    ("corr.hstar", "M_t.hstar", "correction under h* (corr h* - M_t h*)"),
    ("corr.hstar", "imit.hstar", "correction vs imitation (corr h* - imit h*)")]


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
        row = {"row": label}
        for f in fams:
            hit = long.filter((pl.col("group") == key) & (pl.col("family") == f)) if key in present else pl.DataFrame()
            row[f] = fmt_mean_sem(hit["mean"][0], hit["sem"][0]) if hit.height else "–"
        rows.append(row)
    return rows


def delta_rows(frame: pl.DataFrame, n_boot: int) -> list[dict[str, str]]:
    present = set(frame["group"].unique().to_list()) if frame.height else set()
    fams = sorted(set(frame["family"].to_list())) + [OVERALL] if frame.height else []
    rows = []
    for a, b, label in DELTAS:
        if a not in present or b not in present:
            rows.append({"comparison": label, "family": "all", "diff (pp)": "–", "95% CI (pp)": "not run"})
            continue
        for f in fams:
            d = paired_bootstrap(frame, a, b, group="group", family=f, n_boot=n_boot)
            rows.append({"comparison": label, "family": f, "diff (pp)": f"{100 * d.diff:+.1f}",
                         "95% CI (pp)": f"[{100 * d.ci_low:+.1f}, {100 * d.ci_high:+.1f}]" + (" *" if d.significant else ""),
                         "units": str(d.n_units)})
    return rows


def _gate_md(gate: dict[str, Any]) -> str:
    if not gate:
        return "_(the gate has not run)_\n"
    lines = [f"**{gate.get('reason', '')}**", ""]
    for k in ("candidate", "best_seed", "val", "diff", "fit", "merged_dir", "next_student"):
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
              "\n## Paired deltas (bootstrap over instances; * = CI excludes 0)\n", markdown_table(delta_rows(frame, page.n_boot))]
    parts += ["\n## Harness search (validation mean h0 -> h*)\n",
              markdown_table(page.search or [{"search": "(the harness search did not run in this round)"}]),
              "\n## Accepted harness edits\n", markdown_table(page.edits or [{"edit": "(none accepted)"}])]
    parts += ["\n## Correction data (train split)\n", page.corrections_note,
              markdown_table(page.corrections or [{"corrections": "(the correction arm did not run)"}])]
    parts += [f"\n## {title}\n\n{md}" for title, md in page.sections]
    parts += ["\n## Promotion gate\n", _gate_md(page.gate), "\n## Cost and wall time per stage\n",
              markdown_table(page.stages)]
    return "\n".join(parts) + "\n"
