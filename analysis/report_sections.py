"""Report sections beyond success rates: failure composition, component trigger rates, model-harness fit.

    sections = [composition_section(attr, order, random.Random(0)), trigger_section(by_pair, order),
                fit_section(by_pair, base="student", expert="expert")]
    [(s.title, s.markdown) for s in sections]          # what the round's page shows (analysis/round_report.py)
    write_section_plots(sections, out_dir, order)       # each section's PNG beside it

Each section is computed here from records (attributions, trajectories); nothing is typed in.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from agents.records import Trajectory
from analysis import plots
from analysis.composition import (
    COMPOSITION_SCHEMA,
    composition_markdown,
    composition_shift,
    composition_table,
    shift_markdown,
)
from analysis.fit import FitConfig, fit_markdown, fit_table
from analysis.triggers import TRIGGER_SCHEMA, trigger_markdown, trigger_rates

SectionKind = Literal["composition", "triggers", "fit"]
PLOT_FILES: dict[str, str] = {"composition": "failure_composition.png", "triggers": "trigger_rates.png"}


class ReportSection(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: SectionKind
    title: str
    markdown: str = Field(description="Body under the section title (tables and notes).")
    rows: list[dict[str, Any]] = Field(default_factory=list, description="The section's table, for its plot.")
    plot: str | None = Field(default=None, description="PNG file name the section shows, drawn by write_section_plots.")


def composition_section(attributions: pl.DataFrame, order: Sequence[str], rng: random.Random, *,
                        shifts: Sequence[tuple[str, str]] = (), n_boot: int = 2000) -> ReportSection:
    """Shares of failures per category per pair (bootstrap CIs), and the shift between the given pairs."""
    order = [p for p in order if p in set(attributions["pair"].to_list())]
    table = composition_table(attributions, rng, order=order, n_boot=n_boot)
    attributors = ", ".join(sorted(set(attributions["attributor"].to_list()))) or "-"
    md = [f"Attributor: `{attributors}`. Cells: share of the pair's failing rollouts (%), 95% bootstrap CI over "
          f"instances ({n_boot} draws), count. Categories: docs/attribution.md.\n\n",
          composition_markdown(table, order)]
    for a, b in shifts:
        if a in order and b in order:
            md += [f"\nShift `{a}` -> `{b}`:\n\n", shift_markdown(composition_shift(attributions, a, b, rng, n_boot=n_boot))]
    md.append(f"\n![failure composition]({PLOT_FILES['composition']})\n")
    return ReportSection(kind="composition", title="Failure composition", markdown="".join(md),
                         rows=table.to_dicts(), plot=PLOT_FILES["composition"])


def trigger_section(by_pair: Mapping[str, Sequence[Trajectory]], order: Sequence[str], *,
                    components: Mapping[str, Sequence[str]] | None = None,
                    use_patterns: Mapping[str, Mapping[str, str]] | None = None) -> ReportSection:
    """Share of rollouts in which each harness component fired, per pair (the trigger-rate scan)."""
    table = trigger_rates({p: by_pair[p] for p in order if p in by_pair}, components=components,
                          use_patterns=use_patterns)
    md = ("Cells: rollouts in which the component fired (%) (fired / rollouts of the families that have it).\n\n"
          + trigger_markdown(table, list(order)))
    plot = None if table.is_empty() else PLOT_FILES["triggers"]
    if plot:
        md += f"\n![trigger rates]({plot})\n"
    return ReportSection(kind="triggers", title="Component trigger rates", markdown=md, rows=table.to_dicts(), plot=plot)


def fit_section(by_pair: Mapping[str, Sequence[Trajectory]], base: str, expert: str | None = None,
                config: FitConfig | None = None) -> ReportSection:
    """KL of each other pair's planning-action distribution from the base student's and the expert's."""
    cfg = config or FitConfig()
    table = fit_table(by_pair, base, expert, cfg)
    md = (f"Planning-action distributions (tool bigrams + action type by position; analysis/fit.py). KL in nats "
          f"from `{base}`" + (f" and from `{expert}`" if expert else "") + f"; fit at risk above {cfg.threshold_nats:g}.\n\n"
          + fit_markdown(table, cfg.threshold_nats))
    return ReportSection(kind="fit", title="Model-harness fit", markdown=md, rows=table.to_dicts())


def write_section_plots(sections: Sequence[ReportSection], out_dir: Path, order: list[str]) -> dict[str, Path]:
    """Draw each section's PNG into `out_dir`; returns {kind: path}."""
    out: dict[str, Path] = {}
    for s in sections:
        if s.plot is None or not s.rows:
            continue
        out_dir.mkdir(parents=True, exist_ok=True)
        if s.kind == "composition":
            table = pl.DataFrame(s.rows, schema=COMPOSITION_SCHEMA)
            out[s.kind] = plots.composition_bars(table, out_dir / s.plot, [p for p in order if p in set(table["pair"])])
        elif s.kind == "triggers":
            table = pl.DataFrame(s.rows, schema=TRIGGER_SCHEMA)
            out[s.kind] = plots.trigger_heatmap(table, out_dir / s.plot, [p for p in order if p in set(table["pair"])])
    return out
