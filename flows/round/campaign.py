"""The campaign view's rows: every round of a run up to round t, read back from the rounds' stores.

    frame, decisions = campaign_frame(run_root, upto=t)     # analysis/campaign.py makes the table and plot

Per round: M_t on h0 (`evaluate_h0`), M_t on h*_t (`evaluate_h_star`), and, when its gate promoted, the promoted
correction seed's test rollouts on h*_t (`evaluate_arms`: `corr.s<best>.hstar`) as M_{t+1}. A round that has
not run a stage has no rows for it.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl

from analysis.campaign import CAMPAIGN_FRAME
from flows.round.rows import round_tests, rows_frame
from flows.store import RunStore


def round_numbers(run_root: Path) -> list[int]:
    """The rounds a run has a store for, in order."""
    rounds = Path(run_root) / "rounds"
    found = [int(p.name[1:]) for p in rounds.glob("r*") if p.name[1:].isdigit() and (p / "state.json").exists()]
    return sorted(found)


def _round_rows(store: RunStore, t: int) -> tuple[pl.DataFrame, str]:
    tests = round_tests(store)
    gate = store.done("round").get("gate", {}).get("output")
    frame = rows_frame(store, {k: v for k, v in tests.items() if k in ("M_t.h0", "M_t.hstar")
                               or (gate and gate["promoted"] and k == f"corr.s{gate.get('best_seed') or 0}.hstar")})
    if frame.is_empty():
        return pl.DataFrame(schema=CAMPAIGN_FRAME), ""
    series = pl.when(pl.col("group").str.starts_with("corr.")).then(pl.lit("M_next")).otherwise(pl.col("group"))
    rows = frame.select(pl.lit(t, dtype=pl.Int64).alias("round"), series.alias("series"), "family", "instance_id",
                        "seed", "passed")
    decision = "–" if gate is None else ("promoted" if gate["promoted"] else "not promoted")
    return rows.cast(CAMPAIGN_FRAME), decision  # type: ignore[arg-type]


def campaign_frame(run_root: Path, upto: int) -> tuple[pl.DataFrame, dict[int, str]]:
    """Rows (analysis.campaign.CAMPAIGN_FRAME) of rounds <= `upto`, and each round's gate decision."""
    frames, decisions = [], {}
    for t in (t for t in round_numbers(run_root) if t <= upto):
        rows, decision = _round_rows(RunStore.open_existing(Path(run_root) / "rounds", f"r{t}"), t)
        if rows.height:
            frames.append(rows)
            decisions[t] = decision
    return (pl.concat(frames) if frames else pl.DataFrame(schema=CAMPAIGN_FRAME)), decisions
