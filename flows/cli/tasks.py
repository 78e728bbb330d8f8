"""`coevo tasks list | check`: the task suite's inventory and its oracle/do-nothing self-check."""

from __future__ import annotations

import sys
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

import tasks
from tasks.base import SPLIT_RANGES
from tasks.records import SPLITS, Split


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="The task suite: families, splits, tools and the oracle self-check.",
                        no_args_is_help=True)
    group.command("list")(list_families)
    group.command("check")(check)
    app.add_typer(group, name="tasks")


def _console() -> Console:
    # piped output (CI logs) would otherwise be cut to 80 columns and truncate the family names
    return Console() if sys.stdout.isatty() else Console(width=120)


def list_families() -> None:
    """List the task families present in this checkout: instances per split, difficulties and tools."""
    from tasks.runtime.sandbox import sandbox_backend

    table = Table(title="task families")
    for col in ("family", "train", "val", "test", "difficulties", "tools"):
        table.add_column(col)
    for name in tasks.families():
        fam = tasks.get(name)
        env = fam.make_env(fam.generate(0))  # make_env is cheap by contract; tools() needs no reset
        tools = ", ".join(t.name for t in env.tools())
        table.add_row(name, *(str(len(SPLIT_RANGES[s])) for s in SPLITS), "/".join(fam.difficulties), tools)
    console = _console()
    console.print(table)
    console.print(f"sandbox backend for workspace commands: {sandbox_backend()}")


def check(
    family: Optional[list[str]] = typer.Option(
        None, "--family", "-f", help="Family to check (repeatable); default all present."),
    split: Optional[list[str]] = typer.Option(
        None, "--split", "-s", help="train | val | test (repeatable); default all."),
    workers: int = typer.Option(0, "--workers", "-w", min=0, help="Worker processes; 0 = one per CPU core."),
) -> None:
    """Run the oracle and a do-nothing policy on every instance; exit 1 unless the oracle scores 1.0 and
    do-nothing scores < 1.0 everywhere."""
    from tasks.check import run_check

    bad = [s for s in split or [] if s not in SPLITS]
    if bad:
        raise typer.BadParameter(f"unknown split(s) {bad}; choose from {', '.join(SPLITS)}", param_hint="--split")
    known = tasks.families()
    missing = [f for f in family or [] if f not in known]
    if missing:
        raise typer.BadParameter(f"family not present: {missing}; present: {', '.join(known)}", param_hint="--family")
    splits: list[Split] | None = [s for s in SPLITS if s in split] if split else None  # type: ignore[misc]
    summaries, results, seconds = run_check(family or None, splits, workers or None)
    table = Table(title=f"tasks check ({len(results)} instances, {seconds:.1f} s)")
    for col in ("family", "split", "n", "oracle mean", "oracle min", "do-nothing mean", "do-nothing max", "status"):
        table.add_column(col)
    for s in summaries:
        status = "[green]ok[/green]" if s.ok else f"[red]FAIL {len(s.failures)}[/red]"
        table.add_row(s.family, s.split, str(s.n), f"{s.oracle_mean:.3f}", f"{s.oracle_min:.3f}",
                      f"{s.nothing_mean:.3f}", f"{s.nothing_max:.3f}", status)
    console = _console()
    console.print(table)
    failing = [r for r in results if not r.ok]
    for r in failing[:20]:
        v = r.oracle.verdict
        console.print(f"[red]{r.instance_id}[/red]: oracle {v.score:.3f} ({r.oracle.error or v.feedback[:300]}); "
                      f"do-nothing {r.do_nothing.verdict.score:.3f}")
    if failing:
        raise typer.Exit(code=1)
