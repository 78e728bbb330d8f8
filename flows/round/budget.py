"""The run-level API budget: dollars spent by every model call of the run (trajectory and turn records carry
cost; the harness search adds its reflector's), checked before each stage of a round."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from agents.budget import BudgetSpent
from agents.role_calls import role_calls_usd
from agents.tables.trajectories import turns_path

DERIVED = ("sets",)  # rows copied from rollouts already counted


def _derived(parts: tuple[str, ...]) -> bool:
    """Rows copied from episodes counted elsewhere: the arm sets, and the correction stage's corrected rows
    (its probes, rewrites and replays are counted where they are cached: `cache/correction_data`)."""
    return any(d in parts for d in DERIVED) or ("correction_data" in parts and "cache" not in parts)


def spent_usd(run_root: Path) -> float:
    """Dollars recorded in the run's trajectories (search caches and the correction stage's cached episodes
    included, its corrected rows not)."""
    files = [p for p in Path(run_root).rglob("*.parquet") if not p.name.endswith(".turns.parquet")
             and "superseded" not in p.parts and "attributions" not in p.parts and "datasets" not in p.parts
             and not _derived(p.parts)]
    total = 0.0
    for p in files:
        try:
            total += _generated_cost(p) if "cache" in p.parts and "correction_data" in p.parts else \
                float(pl.scan_parquet(p).select(pl.col("cost_usd").sum()).collect().item() or 0.0)
        except (pl.exceptions.ColumnNotFoundError, pl.exceptions.ComputeError, OSError):
            continue
    for summary in Path(run_root).rglob("evolution_summary.json"):
        seeds = json.loads(summary.read_text()).get("search", {}).get("seeds", [])
        total += sum(float(s.get("reflector_cost_usd") or 0.0) for s in seeds)
    return total + role_calls_usd(run_root)  # the judge's and the MLE-agent locator's calls (agents/role_calls.py)


def _generated_cost(path: Path) -> float:
    """Cost of the turns a continuation generated (its prefix turns were paid for by the rollout they copy)."""
    heads = pl.scan_parquet(path).select(pl.col("id").alias("trajectory_id"), "prefix_turns")
    turns = pl.scan_parquet(turns_path(path)).select("trajectory_id", "turn", "cost_usd")
    gen = turns.join(heads, on="trajectory_id").filter(pl.col("turn") >= pl.col("prefix_turns"))
    return float(gen.select(pl.col("cost_usd").sum()).collect().item() or 0.0)


def check_budget(run_root: Path, budget: float | None, run_id: str) -> float:
    """Spent so far; raises BudgetSpent when a budget is set and reached."""
    spent = spent_usd(run_root)
    if budget is not None and spent >= budget:
        raise BudgetSpent(f"run {run_id}: API budget ${budget:.2f} spent (${spent:.2f}); finished work is kept. "
                          f"Raise round.budget_usd and continue with: coevo run --resume {run_id} --config FILE")
    return spent
