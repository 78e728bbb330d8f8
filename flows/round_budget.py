"""The run-level API budget: dollars spent by every model call of the run (trajectory and turn records carry
cost; the harness search adds its reflector's), checked before each stage of a round."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

DERIVED = ("sets", "correction_data")  # rows copied from rollouts already counted


class BudgetSpent(RuntimeError):
    """The run's API budget is spent; the message says how to continue."""


def spent_usd(run_root: Path) -> float:
    """Dollars recorded in the run's trajectories (search caches and correction episodes included)."""
    files = [p for p in Path(run_root).rglob("*.parquet") if not p.name.endswith(".turns.parquet")
             and "superseded" not in p.parts and "attributions" not in p.parts and "datasets" not in p.parts
             and not any(d in p.parts for d in DERIVED)]
    total = 0.0
    for p in files:
        try:
            total += float(pl.scan_parquet(p).select(pl.col("cost_usd").sum()).collect().item() or 0.0)
        except (pl.exceptions.ColumnNotFoundError, pl.exceptions.ComputeError, OSError):
            continue
    for summary in Path(run_root).rglob("evolution_summary.json"):
        seeds = json.loads(summary.read_text()).get("search", {}).get("seeds", [])
        total += sum(float(s.get("reflector_cost_usd") or 0.0) for s in seeds)
    return total


def check_budget(run_root: Path, budget: float | None, run_id: str) -> float:
    """Spent so far; raises BudgetSpent when a budget is set and reached."""
    spent = spent_usd(run_root)
    if budget is not None and spent >= budget:
        raise BudgetSpent(f"run {run_id}: API budget ${budget:.2f} spent (${spent:.2f}); finished work is kept. "
                          f"Raise round.budget_usd and continue with: coevo run --resume {run_id} --config FILE")
    return spent
