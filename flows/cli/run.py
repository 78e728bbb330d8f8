"""`coevo run`, `coevo report`: the Prefect flows from the command line.

    coevo run --config deploy/configs/local.yaml            # what `make run` does
    coevo run --config deploy/configs/local.yaml --full     # the whole 60-instance test split
    coevo run --resume RUN_ID                               # finish a failed run; finished chunks are kept
    coevo report RUN_ID                                     # rebuild report.md + plots from the stored rollouts

Prefect is imported only inside the commands, after `flows.local.configure_prefect_env()` has pointed it
at the project's own PREFECT_HOME (it reads its settings once, at import).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from flows.config import ConfigError, RunConfig, load_config, parse_config, preflight
from flows.local import configure_prefect_env
from flows.cli.options import fail
from flows.store import RunStore, check_run_id, new_run_id

console = Console(soft_wrap=True)  # long paths stay on one line (copy-pasteable)


def _print_result(run_id: str, run_dir: str, report_path: str, family_rows: list[dict[str, str]], pairs: list[str]) -> None:
    from rich.table import Table

    console.print(f"[bold]Success rate per family[/] (%, mean ± SEM over seeds), run {run_id}")
    table = Table()
    table.add_column("family")
    for p in pairs:
        table.add_column(p, justify="right")
    for i, r in enumerate(family_rows):  # a rule above the last row, `overall`
        table.add_row(*(r.get(c, "") for c in ["family", *pairs]), end_section=i == len(family_rows) - 2)
    console.print(table)
    console.print(f"run directory: {run_dir}")
    console.print(f"[bold]report:[/] {report_path}")


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
    rounds: Annotated[int, typer.Option(min=1, help="Co-evolution rounds (a config with `round:`); the run ends early "
                                        "after a round that changed neither the student nor the harness.")] = 1,
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
    """Run a config: co-evolution rounds (a config with `round:`) or the evaluation flow (serve, roll out, report)."""
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
    if cfg.round is not None:
        _run_rounds(cfg, run_id, rounds, from_stage, runs_dir, where)
        return
    if from_stage is not None or rounds != 1:
        fail("config error: --rounds and --from-stage need a config with a `round:` section")
    _run_evaluation(cfg, run_id, runs_dir, where)


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
    if cfg.round is None:
        pairs = cfg.with_adapter_pair().evaluation.pairs
        n = cfg.evaluation.n_instances or 60
        console.print(f"evaluation config (no `round:`): {len(pairs)} pair(s) x {len(cfg.family_names())} families x "
                      f"{n} instances x {cfg.evaluation.seeds} seeds = {len(pairs) * len(cfg.family_names()) * n * cfg.evaluation.seeds} "
                      f"rollouts" + ("; then LoRA training" if cfg.training else ""))
        preflight(cfg, Path.cwd())
        console.print("config OK (dry run: nothing started)")
        return
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
    console.print(f"run [bold]{run_id}[/]: {rounds} co-evolution round(s) on {len(cfg.family_names())} families; {where}")
    with _run_errors(run_id, runs_dir):
        result = coevolution_run(cfg, run_id, rounds, from_stage, str(Path.cwd()))
    for r in result.rounds:
        console.print(f"round {r.t} ({r.student}): {r.decision}", markup=False, highlight=False)
        console.print(f"  report: {r.report_path}", markup=False, highlight=False)
    console.print(f"run directory: {result.run_dir}; API spent ${result.spent_usd:.2f}")
    if result.message:
        console.print(result.message, markup=False, highlight=False)
    if result.status == "budget_spent":
        raise typer.Exit(3)


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


def _run_evaluation(cfg: RunConfig, run_id: str, runs_dir: Optional[str], where: str) -> None:
    from flows.round.lock import RunLock

    fams = cfg.family_names()
    console.print(f"run [bold]{run_id}[/]: {len(cfg.with_adapter_pair().evaluation.pairs)} pair(s) × {len(fams)} families × "
                  f"{cfg.evaluation.n_instances or 'all'} instances × {cfg.evaluation.seeds} seeds; {where}")
    from flows.evaluation.flow import evaluation_flow

    t0 = time.monotonic()
    with _run_errors(run_id, runs_dir), RunLock(Path(cfg.runs_dir) / run_id):
        result = evaluation_flow(cfg, run_id=run_id, base_dir=str(Path.cwd()))
    rep = result.report
    _print_result(result.run_id, result.run_dir, rep.report_path, rep.family_rows, rep.pairs)
    collected = ", ".join(f"{c['pair']}: {c['rollouts_run']} run / {c['rollouts']}" for c in result.collected)
    console.print(f"rollouts ({collected}) in {time.monotonic() - t0:.0f} s; dashboard: coevo dashboard")


def report(
    run_id: Annotated[str, typer.Argument(help="A run id under runs/ (see `ls runs`).")],
    runs_dir: Annotated[str, typer.Option(help="Where runs live.")] = "runs",
) -> None:
    """Rebuild report.md and the PNG plots of a run from its stored trajectories (also a Prefect artifact)."""
    where = configure_prefect_env()
    try:
        RunStore.open_existing(runs_dir, run_id)
    except (FileNotFoundError, ValueError) as e:  # no such run; a run id that is a path ('..')
        fail(f"RUN_ID: {e}")
    console.print(where)
    rounds = sorted((Path(runs_dir) / run_id / "rounds").glob("r*/reports/report.md"))
    if rounds:  # a co-evolution run: its pages are written by each round's `report` stage
        for page in rounds:
            console.print(f"round {page.parent.parent.name}: {page.resolve()}", markup=False, highlight=False)
        console.print(f"summary: {(Path(runs_dir) / run_id / 'reports' / 'summary.md').resolve()}", markup=False,
                      highlight=False)
        console.print(f"rebuild a page: coevo run --resume {run_id} --runs-dir {runs_dir} --from-stage report")
        return
    from flows.evaluation.flow import report_flow

    try:
        rep = report_flow(run_id, runs_dir)
    except ValueError as e:
        console.print(f"[red]{e}[/]")
        raise typer.Exit(1) from None
    _print_result(rep.run_id, str(Path(rep.report_path).parent.parent), rep.report_path, rep.family_rows, rep.pairs)
    for name, path in rep.plots.items():
        console.print(f"plot {name}: {path}")


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.command("report")(report)
