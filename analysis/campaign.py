"""The campaign view: how a run's student and harness moved round after round.

    table = campaign_table(frame)                  # (round, series, family, mean, sem, n_seeds, n_instances)
    md = campaign_markdown(table, decisions)       # one row per (round, family)
    plots.campaign_lines(table, out / "campaign.png", SERIES)

`frame` has one row per test rollout of every round so far: `round`, `series` (one of `SERIES`' keys), `family`,
`instance_id`, `seed`, `passed`. The series, per round t:
- `M_t.h0`: M_t on the baseline harness h0;
- `M_t.hstar`: M_t on the harness h*_t its round's search found;
- `M_next`: the promoted M_{t+1} (the correction seed the gate promoted) on h*_t, when round t promoted one.
Cells: success %, mean ± SEM over evaluation seeds (analysis/stats.py `family_table`).
"""

from __future__ import annotations

from collections.abc import Mapping

import polars as pl

from analysis.report import markdown_table
from analysis.stats import OVERALL, family_table, fmt_mean_sem

SERIES: list[tuple[str, str]] = [("M_t.h0", "M_t on h0"), ("M_t.hstar", "M_t on h*_t"),
                                 ("M_next", "promoted M_{t+1} on h*_t")]
CAMPAIGN_FRAME: dict[str, pl.DataType] = {"round": pl.Int64(), "series": pl.String(), "family": pl.String(),
                                          "instance_id": pl.String(), "seed": pl.Int64(), "passed": pl.Boolean()}
PLOT = "campaign.png"


def campaign_table(frame: pl.DataFrame) -> pl.DataFrame:
    """(round, series, family incl. overall, mean, sem, n_seeds, n_instances)."""
    if frame.is_empty():
        return pl.DataFrame(schema={"round": pl.Int64(), "series": pl.String(), "family": pl.String(),
                                    "mean": pl.Float64(), "sem": pl.Float64()})
    keyed = frame.with_columns((pl.col("round").cast(pl.String) + "|" + pl.col("series")).alias("key"))
    long = family_table(keyed, group="key")
    parts = pl.col("key").str.split_exact("|", 1)
    return (long.with_columns(parts.struct.field("field_0").cast(pl.Int64).alias("round"),
                              parts.struct.field("field_1").alias("series"))
            .drop("key").sort("round", "series", "family"))


def campaign_markdown(table: pl.DataFrame, decisions: Mapping[int, str], plot: str | None = PLOT) -> str:
    """One row per (round, family): the three series (mean ± SEM, '–' when not run or not promoted), and the
    round's gate decision once per round."""
    if table.is_empty():
        return "_(no round has evaluated M_t yet)_\n"
    cells = {(r["round"], r["series"], r["family"]): fmt_mean_sem(r["mean"], r["sem"])
             for r in table.iter_rows(named=True)}
    fams = sorted(f for f in set(table["family"].to_list()) if f != OVERALL) + [OVERALL]
    rows = []
    for t in sorted(set(table["round"].to_list())):
        for i, f in enumerate(fams):
            rows.append({"round": f"r{t}" if i == 0 else "", "family": f,
                         **{label: cells.get((t, key, f), "–") for key, label in SERIES},
                         "gate": decisions.get(t, "") if i == 0 else ""})
    md = ("Success %, mean ± SEM over evaluation seeds, on the test split. M_{t+1}: the correction adapter the gate "
          "promoted, on the harness it was trained for ('–': not promoted, M_t carries on).\n\n" + markdown_table(rows))
    return md + (f"\n![campaign]({plot})\n" if plot else "")
