"""Two runs' test rollouts, paired: what `coevo compare` and the nightly evaluation's link print.

    a, b = run_rows("runs/20261205-...-local", runs_dir="runs"), run_rows("20261206-...-local", runs_dir="runs")
    comparison = compare_runs(a, b, rows=["M_t.h0"], n_boot=2000)     # analysis/compare.py: B - A with CIs

A run is named by its directory or by its id under `runs_dir`; its rows are one round's test rollouts (the last
round that evaluated anything, or `round_t`), read back from that round's store (flows/round/rows.py). The
refusals (different task suites, no unit in common) are analysis/compare.py's `CompareRefused`.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from analysis.compare import Comparison, CompareRefused, compare_frames
from flows.round.campaign import round_numbers
from flows.round.rows import round_tests, rows_frame
from flows.store import RunStore


class RunRows(BaseModel):
    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    name: str = Field(description="The run id (its directory's name).")
    root: str
    round_t: int
    frame: pl.DataFrame

    @property
    def label(self) -> str:
        return f"{self.name} r{self.round_t}"


def run_root(run: str, runs_dir: str | Path) -> Path:
    """A run directory given as a path, or as a run id under `runs_dir`; one-line ValueError otherwise."""
    direct = Path(run)
    if (direct / "state.json").exists():
        return direct
    try:
        return RunStore.open_existing(runs_dir, run).root
    except (FileNotFoundError, ValueError) as e:
        raise ValueError(f"{run}: {e}") from None


def run_rows(run: str, runs_dir: str | Path = "runs", round_t: int | None = None) -> RunRows:
    """The run's test rollouts of round `round_t` (default: its last round with evaluated rows)."""
    root = run_root(run, runs_dir)
    rounds = round_numbers(root)
    if round_t is not None and round_t not in rounds:
        raise ValueError(f"{run}: no round r{round_t} (rounds: {', '.join(f'r{t}' for t in rounds) or 'none'})")
    for t in reversed([round_t] if round_t is not None else rounds):
        store = RunStore.open_existing(root / "rounds", f"r{t}")
        frame = rows_frame(store, round_tests(store))
        if frame.height:
            return RunRows(name=root.name, root=str(root.resolve()), round_t=t, frame=frame)
    which = f"round r{round_t}" if round_t is not None else "no round"
    raise ValueError(f"{run}: {which} has evaluated test rollouts yet")


def compare_runs(a: RunRows, b: RunRows, rows: list[str] | None = None, n_boot: int = 2000,
                 seed: int = 0) -> Comparison:
    """B - A per row and family on the shared units (analysis/compare.py); CompareRefused when they cannot be."""
    if a.root == b.root and a.round_t == b.round_t:
        raise CompareRefused(f"{a.label} is compared with itself: give two runs (or two rounds with --round-a/--round-b)")
    return compare_frames(a.frame, b.frame, rows or None, names=(a.label, b.label), n_boot=n_boot, seed=seed)
