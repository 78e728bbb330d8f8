"""`coevo compare RUN_A RUN_B`: two runs' rows side by side, paired on the (instance, seed) units both ran.

    coevo compare 20261205-090000-local 20261206-090000-local             # every row both runs have
    coevo compare runs/A runs/B --row M_t.h0 --row expert.h0 --out diff.md
    coevo compare RUN --round-a 0 RUN --round-b 1                         # two rounds of one run

Prints B - A per row and family with a bootstrap 95% CI (instances and training seeds resampled). Refuses in one
line (exit 2) when the runs' task suites differ (an instance both ran has different contents: the suite
fingerprint over the shared instances differs) or when they share no unit. docs/cli.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

console = Console(soft_wrap=True)


def compare(
    run_a: Annotated[str, typer.Argument(help="Run A: a run directory, or a run id under --runs-dir.")],
    run_b: Annotated[str, typer.Argument(help="Run B (the difference printed is B - A).")],
    row: Annotated[Optional[list[str]], typer.Option(help="A report row key to compare (repeatable): M_t.h0, "
                                                    "M_t.hstar, expert.h0, expert.hstar, imit_h0.h0, imit.hstar, "
                                                    "corr.hstar, self.hstar, pairs.<label>. Default: every row "
                                                    "both runs have.")] = None,
    runs_dir: Annotated[str, typer.Option(help="Where run ids are looked up.")] = "runs",
    round_a: Annotated[Optional[int], typer.Option(min=0, help="Run A's round (default: its last round that "
                                                   "evaluated anything).")] = None,
    round_b: Annotated[Optional[int], typer.Option(min=0, help="Run B's round (default: its last).")] = None,
    bootstrap: Annotated[int, typer.Option(min=100, help="Bootstrap draws for the CIs.")] = 2000,
    seed: Annotated[int, typer.Option(help="Seed of the bootstrap draws.")] = 0,
    out: Annotated[Optional[Path], typer.Option(help="Also write the comparison as markdown to this file.")] = None,
) -> None:
    """Paired differences (B - A) of two runs' report rows, with 95% CIs, on the (instance, seed) units both ran.

    Refuses in one line (exit 2) when an instance both runs ran has different contents (their task suites'
    fingerprints differ) or when the runs share no unit. docs/cli.md, "Comparing two runs".
    """
    from analysis.compare import CompareRefused, comparison_markdown, comparison_rows
    from flows.cli.options import fail
    from flows.ops.compare import compare_runs, run_rows
    from flows.store import atomic_write_text

    try:
        a = run_rows(run_a, runs_dir, round_a)
        b = run_rows(run_b, runs_dir, round_b)
        result = compare_runs(a, b, row, n_boot=bootstrap, seed=seed)
    except CompareRefused as e:
        fail(f"not compared: {e}")
    except ValueError as e:
        fail(str(e))
    console.print(f"A = {result.a} (suite {result.suite_a}); B = {result.b} (suite {result.suite_b}); "
                  f"{result.shared_instances} instances in common (suite {result.shared_suite} on both sides)",
                  markup=False, highlight=False)
    table = Table(title=f"B - A, paired on shared (instance, seed) units; 95% CI, {result.n_boot} bootstrap draws",
                  title_justify="left")
    rows = comparison_rows(result)
    for col in rows[0]:
        table.add_column(col, justify="left" if col in ("row", "family") else "right")
    for r in rows:
        table.add_row(*r.values())
    (console if console.is_terminal else Console(width=160)).print(table)
    for s in result.skipped:
        console.print(f"not compared: {s}", markup=False, highlight=False)
    if out is not None:
        atomic_write_text(out, f"# {result.a} vs {result.b}\n\n" + comparison_markdown(result))
        console.print(f"written: {out}", markup=False, highlight=False)


def register(app: typer.Typer) -> None:
    app.command("compare")(compare)
