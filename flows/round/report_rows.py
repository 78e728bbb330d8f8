"""The round report's sections over its rows and across the run's rounds, with their PNGs.

    views = row_views(run_root, t, frame, rows, out_dir, n_boot=2000)
    page = RoundPage(..., row_sections=views.row_sections, closing=views.closing)

`row_sections`: pass@1 / pass@k / pass^k with CIs, the cost of each row, and the two plots (family_success.png,
cost_vs_success.png), analysis/report.py. `closing`: the campaign (analysis/campaign.py) of rounds 0..t of the
run, a table and campaign.png, when the round evaluated M_t (`evaluate_h0` or `evaluate_h_star`).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from analysis import plots
from analysis.campaign import PLOT, SERIES, campaign_markdown, campaign_table
from analysis.report import row_costs, row_sections, write_row_plots
from flows.round.campaign import campaign_frame

PASS_K_SEED = 0  # the bootstrap draws of the pass@k CIs (the report is the same on every rebuild)


class RowViews(BaseModel):
    model_config = ConfigDict(extra="forbid")

    row_sections: list[tuple[str, str]] = Field(default_factory=list)
    closing: list[tuple[str, str]] = Field(default_factory=list)
    plots: dict[str, str] = Field(default_factory=dict, description="Plot name -> PNG path.")
    pass_k: list[dict[str, Any]] = Field(default_factory=list, description="The pass@k table's rows (artifact).")
    row_costs: list[dict[str, Any]] = Field(default_factory=list, description="Cost per row (artifact).")


def _campaign(run_root: Path, t: int, out_dir: Path) -> tuple[list[tuple[str, str]], dict[str, str]]:
    frame, decisions = campaign_frame(run_root, t)
    if frame.is_empty():
        return [], {}
    table = campaign_table(frame)
    path = plots.campaign_lines(table, out_dir / PLOT, SERIES)
    rounds = sorted(decisions)
    title = f"Campaign: rounds r{rounds[0]}..r{rounds[-1]} of this run" if len(rounds) > 1 else \
        f"Campaign: round r{rounds[0]} (the first of this run)"
    return [(title, campaign_markdown(table, decisions))], {"campaign": str(path)}


def row_views(run_root: Path, t: int, frame: pl.DataFrame, rows: Sequence[tuple[str, str]], out_dir: Path,
              n_boot: int) -> RowViews:
    """The sections, their plots and their tables (module docstring)."""
    if frame.is_empty():
        return RowViews()
    out_dir.mkdir(parents=True, exist_ok=True)
    sections, pk = row_sections(frame, rows, random.Random(PASS_K_SEED), n_boot)
    paths = {k: str(v) for k, v in write_row_plots(frame, rows, out_dir).items()}
    closing, more = _campaign(run_root, t, out_dir)
    costs = row_costs(frame, rows)
    return RowViews(row_sections=sections, closing=closing, plots={**paths, **more},
                    pass_k=[{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
                            for r in pk.iter_rows(named=True)],
                    row_costs=[{k: (round(v, 4) if isinstance(v, float) else v) for k, v in r.items()}
                               for r in costs.iter_rows(named=True)])
