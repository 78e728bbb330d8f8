"""`coevo run`, `coevo report`: the Prefect flows from the command line.

    coevo run --config deploy/configs/local.yaml            # what `make run` does
    coevo run --config deploy/configs/local.yaml --full     # the whole 60-instance test split
    coevo run --resume RUN_ID                               # finish a failed run; finished chunks are kept
    coevo report RUN_ID                                     # where the run's round pages are

Prefect is imported only inside the commands, after `flows.local.configure_prefect_env()` has pointed it
at the project's own PREFECT_HOME (it reads its settings once, at import).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from flows.config import ConfigError, RunConfig, load_config, parse_config, preflight
from flows.local import configure_prefect_env
from flows.cli.options import fail
from flows.provenance import describe
from flows.store import RunStore, check_run_id, new_run_id

console = Console(soft_wrap=True)  # long paths stay on one line (copy-pasteable)


def _resolve_config(config: Optional[Path], resume: Optional[str], runs_dir: Optional[str]) -> tuple[RunConfig, str]:
    if resume:
        try:
            check_run_id(resume)
        except ValueError as e:
            raise ConfigError(f"--resume: {e}") from None
        if config is not None:
            cfg = load_config(config)
        else:
            base = Path(runs_dir or "runs")
            try:
                store = RunStore.open_existing(base, resume)
            except FileNotFoundError as e:
                raise ConfigError(str(e)) from None
            cfg = parse_config(store.load_config_dict(), str(store.root / "config.yaml"))
        if not (Path(runs_dir or cfg.runs_dir) / resume / "state.json").exists():
            raise ConfigError(f"--resume: no run '{resume}' under {Path(runs_dir or cfg.runs_dir).resolve()}")
        return cfg, resume
    if config is None:
        raise ConfigError("give --config FILE (or --resume RUN_ID)")
    cfg = load_config(config)
    return cfg, new_run_id(cfg.name)


def run(
    config: Annotated[Optional[Path], typer.Option(help="Run config YAML (deploy/configs/local.yaml is the default job).")] = None,
    resume: Annotated[Optional[str], typer.Option(help="Finish this run: finished stages and rollouts are loaded, not re-run.")] = None,
    rounds: Annotated[int, typer.Option(min=1, help="Co-evolution rounds; the run ends early after a round that "
                                        "changed neither the student nor the harness, or one without a gate.")] = 1,
    from_stage: Annotated[Optional[str], typer.Option(help="With --resume: recompute this round stage and every later "
                                                          "one (their outputs are moved aside).")] = None,
    dry_run: Annotated[bool, typer.Option(help="Print the planned stages, rollouts, model calls, LoRA runs and an "
                                               "estimate; check the config end to end; start nothing.")] = False,
    full: Annotated[bool, typer.Option(help="Evaluate the whole split (60 test instances per family).")] = False,
    n_instances: Annotated[Optional[int], typer.Option(help="Instances per family (overrides the config).")] = None,
    seeds: Annotated[Optional[int], typer.Option(help="Seeds per instance (overrides the config).")] = None,
    families: Annotated[Optional[str], typer.Option(help="Comma-separated families (overrides the config).")] = None,
    runs_dir: Annotated[Optional[str], typer.Option(help="Where runs live (overrides the config's runs_dir).")] = None,
) -> None:
    """Run a config: rounds of its stages (`round.stages`; a config without `round:` evaluates its
    `evaluation.pairs`): serve the models, roll out, search, train, gate, report."""
    where = configure_prefect_env()
    try:
        cfg, run_id = _resolve_config(config, resume, runs_dir)
        cfg = _overrides(cfg, config, full, n_instances, seeds, families, runs_dir)
        if from_stage is not None and not resume:
            raise ConfigError("--from-stage recomputes stages of an existing run: give --resume RUN_ID too")
        if from_stage is not None:
            from flows.round.runner import STAGES

            if from_stage not in STAGES:
                raise ConfigError(f"--from-stage: unknown stage '{from_stage}'; stages: {', '.join(STAGES)}")
        if dry_run:
            _dry_run(cfg, rounds)
            return
        preflight(cfg, Path.cwd())
    except ConfigError as e:
        fail(f"config error: {e}")
    _run_rounds(cfg, run_id, rounds, from_stage, runs_dir, where)


def _overrides(cfg: RunConfig, config: Optional[Path], full: bool, n_instances: Optional[int], seeds: Optional[int],
               families: Optional[str], runs_dir: Optional[str]) -> RunConfig:
    ev: dict[str, object] = {}
    if full:
        ev["n_instances"] = None
    elif n_instances is not None:
        ev["n_instances"] = n_instances
    if seeds is not None:
        ev["seeds"] = seeds
    data = cfg.model_dump(mode="json")
    data["evaluation"].update(ev)
    if families:
        data["families"] = [f.strip() for f in families.split(",") if f.strip()]
    if runs_dir:
        data["runs_dir"] = runs_dir
    return parse_config(data, str(config or "resumed config"))


def _dry_run(cfg: RunConfig, rounds: int) -> None:
    from flows.round.plan import plan_round

    plan = plan_round(cfg, Path.cwd(), rounds)
    for line in plan.lines:
        console.print(line, markup=False, highlight=False)
    for w in plan.warnings:
        console.print(f"warning: {w}", markup=False, highlight=False)
    for e in plan.errors:
        console.print(f"error: {e}", markup=False, highlight=False)
    if plan.errors:
        raise typer.Exit(1)
    console.print("config OK (dry run: nothing started)")


def _run_rounds(cfg: RunConfig, run_id: str, rounds: int, from_stage: Optional[str], runs_dir: Optional[str],
                where: str) -> None:
    from flows.round.flow import coevolution_run
    from flows.round.lock import RunLock

    with _run_errors(run_id, runs_dir):  # before Prefect starts: a second writer of the same run gets one line
        RunLock(Path(cfg.runs_dir) / run_id).check()
    console.print(f"run [bold]{run_id}[/]: {rounds} round(s) of {len(cfg.round.stages)} stage(s) on "
                  f"{len(cfg.family_names())} families; {where}")
    with _run_errors(run_id, runs_dir):
        result = coevolution_run(cfg, run_id, rounds, from_stage, str(Path.cwd()))
    for r in result.rounds:
        _print_table(r.t, r.table)
        console.print(f"round {r.t} ({r.student}): {r.decision}", markup=False, highlight=False)
        if r.report_path:
            console.print(f"  report: {r.report_path}", markup=False, highlight=False)
    console.print(f"run directory: {result.run_dir}; API spent ${result.spent_usd:.2f}")
    if result.message:
        console.print(result.message, markup=False, highlight=False)
    if result.status == "budget_spent":
        raise typer.Exit(3)


def _print_table(t: int, rows: list[dict[str, str]]) -> None:
    """The round report's main table (success %, mean ± SEM) on the terminal; rows that did not run are left out."""
    from rich.table import Table

    ran = [r for r in rows if any(v != "–" for k, v in r.items() if k != "row")]
    if not ran:
        return
    table = Table(title=f"round {t}: success % (mean ± SEM)", title_justify="left")
    for col in ran[0]:
        table.add_column(col, justify="left" if col == "row" else "right")
    for r in ran:
        table.add_row(*r.values())
    # a log file (not a terminal) is 80 columns to rich: give it room so each row stays on one line
    (console if console.is_terminal else Console(width=160)).print(table)


@contextlib.contextmanager
def _run_errors(run_id: str, runs_dir: Optional[str]) -> Iterator[None]:
    """A held lock, Ctrl-C or a failed flow: one clear message with how to continue, and the exit code."""
    from flows.round.lock import LockHeld

    resume_hint = f"coevo run --resume {run_id}" + (f" --runs-dir {runs_dir}" if runs_dir else "")
    try:
        yield
    except LockHeld as e:
        console.print(str(e), markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        console.print(f"[yellow]interrupted[/]; finish it with: {resume_hint}")
        raise typer.Exit(130) from None
    except Exception as e:  # the flow's own logs have the traceback; say how to continue
        console.print(f"[red]run {run_id} failed:[/] {type(e).__name__}: {e}")
        console.print(f"finished work is kept; continue with: {resume_hint}")
        raise typer.Exit(1) from None


def report(
    run_id: Annotated[str, typer.Argument(help="A run id under runs/ (see `ls runs`).")],
    runs_dir: Annotated[str, typer.Option(help="Where runs live.")] = "runs",
) -> None:
    """Where a run's pages are: each round's report.md (written by its `report` stage) and the run summary, and
    the code it ran (the git commit of each start and resume, runs/<id>/code.json)."""
    try:
        RunStore.open_existing(runs_dir, run_id)
    except (FileNotFoundError, ValueError) as e:  # no such run; a run id that is a path ('..')
        fail(f"RUN_ID: {e}")
    pages = sorted((Path(runs_dir) / run_id / "rounds").glob("r*/reports/report.md"))
    if not pages:
        fail(f"run {run_id} has no round report yet; finish it with: coevo run --resume {run_id} --runs-dir {runs_dir}")
    console.print(f"code: {describe(Path(runs_dir) / run_id)}", markup=False, highlight=False)
    for page in pages:
        console.print(f"round {page.parent.parent.name}: {page.resolve()}", markup=False, highlight=False)
    console.print(f"summary: {(Path(runs_dir) / run_id / 'reports' / 'summary.md').resolve()}", markup=False,
                  highlight=False)
    console.print(f"rebuild a page: coevo run --resume {run_id} --runs-dir {runs_dir} --from-stage report")


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("report")(report)
