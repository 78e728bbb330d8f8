"""The evaluation report: markdown tables + PNG plots, computed from stored trajectories.

    rep = build_report(frame, order=["student", "expert"], title="...", meta={...})
    paths = write_report(rep, frame, out_dir)    # report.md, family_success.png, cost_vs_success.png
    rep = build_report(frame, order, title="...", sections=[...])   # extra sections (analysis/report_sections.py)

Sections: by default the component trigger rates (computed from the frame's trajectories); pass `sections`
to choose them (failure composition needs attributions, the fit table needs to know the base and expert pairs).

`frame` is a trajectory table with a `pair` column (the (model, harness) label). Nothing here is typed in:
every number comes from `analysis.stats` on the rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from analysis import plots
from analysis.report_sections import ReportSection, write_section_plots
from analysis.stats import (
    OVERALL,
    PairedDiff,
    cost_latency_table,
    family_table,
    paired_bootstrap,
    pass_k_table,
    stop_reason_table,
    wide_table,
)


class Report(BaseModel):
    model_config = ConfigDict(extra="forbid")

    markdown: str
    family_rows: list[dict[str, str]] = Field(description="Rows = families + overall, columns = pairs (mean ± SEM %).")
    paired: list[PairedDiff] = Field(default_factory=list)
    n_rollouts: int
    sections: list[ReportSection] = Field(default_factory=list, description="Extra sections, in report order.")


def markdown_table(rows: list[dict[str, Any]], columns: list[str] | None = None) -> str:
    if not rows:
        return "_(no rows)_\n"
    cols = columns or list(rows[0])
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(_cell(r.get(c, "")) for c in cols) + " |")
    return "\n".join(lines) + "\n"


def _cell(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v).replace("|", "\\|")


def _pass_k_rows(frame: pl.DataFrame, order: list[str]) -> tuple[list[dict[str, str]], list[int]] | None:
    """Rows = families, cells 'pass^1 / pass^kmax' per pair; None when there is nothing to show."""
    pk = pass_k_table(frame)
    if pk.is_empty():
        return None
    kmax = int(pk["k"].max())
    ks = sorted({1, kmax})
    families = sorted(f for f in pk["family"].unique().to_list() if f != OVERALL) + [OVERALL]
    val = {(r["pair"], r["family"], r["k"]): r["pass_k"] for r in pk.iter_rows(named=True)}
    rows = []
    for f in families:
        row = {"family": f}
        for g in order:
            row[g] = " / ".join(f"{100 * val[(g, f, k)]:.1f}" if (g, f, k) in val else "–" for k in ks)
        rows.append(row)
    return rows, ks


def paired_diffs(frame: pl.DataFrame, order: list[str], n_boot: int = 2000, seed: int = 0) -> list[PairedDiff]:
    """Each pair against the first (the reference), per family and overall, on shared (instance, seed) units."""
    if len(order) < 2:
        return []
    ref = order[0]
    families = sorted(frame["family"].unique().to_list()) + [OVERALL]
    out = []
    for other in order[1:]:
        for f in families:
            try:
                out.append(paired_bootstrap(frame, other, ref, family=f, n_boot=n_boot, seed=seed))
            except ValueError:
                continue  # this pair did not run this family: nothing to compare
    return out


def build_report(frame: pl.DataFrame, order: list[str], *, title: str, meta: dict[str, Any] | None = None,
                 n_boot: int = 2000, sections: Sequence[ReportSection] | None = None) -> Report:
    if frame.is_empty():
        raise ValueError("no trajectories to report on")
    order = [g for g in order if g in set(frame["pair"].to_list())]
    sections = sections or []
    meta = meta or {}
    n_seeds = frame["seed"].n_unique()
    fam_rows = wide_table(frame, order=order)
    md = [f"# {title}\n\n"]
    if meta:
        md.append(markdown_table([{"key": k, "value": v} for k, v in meta.items()]))
    md.append(f"\n## Success rate per family (%, mean ± SEM over {n_seeds} seed(s))\n")
    md.append(f"Rollouts: {frame.height}. Success = verifier score 1.0. `overall` = mean of the family rates.\n\n")
    md.append(markdown_table(fam_rows, ["family", *order]))
    pk = _pass_k_rows(frame, order)
    if pk is not None:
        rows, ks = pk
        md.append(f"\n## pass^k (%, k = {' / '.join(map(str, ks))})\n\n")
        md.append("pass^k = chance that k of an instance's seeds all succeed, averaged over instances.\n\n")
        md.append(markdown_table(rows, ["family", *order]))
    paired = paired_diffs(frame, order, n_boot=n_boot)
    if paired:
        md.append(f"\n## Paired difference vs `{order[0]}` (percentage points, bootstrap {int(paired[0].confidence * 100)}% CI)\n\n")
        md.append("Units are (instance, seed) both pairs ran; instances are resampled "
                  f"({paired[0].n_boot} bootstrap draws).\n\n")
        md.append(markdown_table([
            {"pair": p.a, "family": p.family, "diff": f"{100 * p.diff:+.1f}",
             "95% CI": f"[{100 * p.ci_low:+.1f}, {100 * p.ci_high:+.1f}]", "units": p.n_units,
             "significant": ("n/a (1 instance)" if p.n_instances < 2 else "yes" if p.significant else "no")}
            for p in paired]))
    md.append("\n## Cost and latency per rollout\n\n")
    cl = cost_latency_table(frame)
    md.append(markdown_table([
        {"pair": r["pair"], "rollouts": r["rollouts"], "cost/rollout (USD)": f"{r['cost_usd_mean']:.4f}",
         "total cost (USD)": f"{r['cost_usd_total']:.4f}", "wall s (mean)": f"{r['wall_s_mean']:.2f}",
         "wall s (p95)": f"{r['wall_s_p95']:.2f}", "turns (mean)": f"{r['turns_mean']:.1f}",
         "tokens (mean)": f"{r['tokens_mean']:.0f}"} for r in cl.iter_rows(named=True)]))
    md.append("\n## Stop reasons\n\n")
    md.append(markdown_table([dict(r) for r in stop_reason_table(frame).iter_rows(named=True)]))
    for sec in sections:
        md.append(f"\n## {sec.title}\n\n{sec.markdown}")
    md.append("\n## Plots\n\n![success per family](family_success.png)\n\n![cost vs success](cost_vs_success.png)\n")
    return Report(markdown="".join(md), family_rows=fam_rows, paired=paired, n_rollouts=frame.height,
                  sections=list(sections))


def write_report(report: Report, frame: pl.DataFrame, out_dir: str | Path, order: list[str]) -> dict[str, Path]:
    """Writes report.md, the two PNGs and the sections' PNGs into `out_dir` (the markdown atomically); returns paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    order = [g for g in order if g in set(frame["pair"].to_list())]
    md_path = out / "report.md"
    tmp = md_path.with_suffix(".md.tmp")
    tmp.write_text(report.markdown)
    tmp.replace(md_path)
    return {
        "report": md_path,
        "family_success": plots.family_bars(frame, out / "family_success.png", order),
        "cost_vs_success": plots.cost_vs_success(frame, out / "cost_vs_success.png", order),
        **write_section_plots(report.sections, out, order),
    }


def long_family_table(frame: pl.DataFrame) -> list[dict[str, Any]]:
    """family_table as plain dicts (for Prefect table artifacts)."""
    return [dict(r) for r in family_table(frame).iter_rows(named=True)]
