"""The co-evolution round as a stage graph (docs/flows.md, "The co-evolution round").

    coevolution_round("deploy/configs/local.yaml", rounds=1)                 # a new run
    coevolution_round(path, run_id="...")                                     # resume: finished stages skipped
    coevolution_round(path, run_id="...", from_stage="attribute")            # recompute attribute and later

Per round t (a store of its own, `runs/<run_id>/rounds/r<t>/`): serve (the round's model servers, one scope) ->
evaluate_h0 -> evolve -> evaluate_h_star -> arm_data -> train -> (hot-load the adapters) -> evaluate_arms ->
attribute -> gate -> report; then round t+1 starts from (M_{t+1} or M_t, h*_t). The stage functions live in
flows/round/stages.py, flows/round/data.py, flows/round/train.py, flows/round/gate.py, flows/round/reporting.py.

Each stage is a Prefect subflow; its output is a pydantic record stored in the round's `state.json` (stage
`round`) with a content key of the run config and the upstream stage's key: a resumed run skips a stage whose
key matches, and inside an unfinished stage the stored rollouts (one file per rollout, content-keyed), the
search's cache, the correction episodes and finished LoRA seeds are found and not redone. `from_stage` moves the
outputs of that stage and every later one aside (`<round>/superseded/<time>/`) and recomputes them.
Transient errors (timeouts, lost Ray actors) are retried by the rollout task; anything else fails the run,
which `coevo run --resume RUN_ID` continues. A run-level API budget (`round.budget_usd`) is checked before each
stage: spent -> the run stops cleanly, resumable with a larger budget.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

from prefect import flow, get_run_logger
from prefect.artifacts import (create_link_artifact, create_markdown_artifact, create_progress_artifact,
                               create_table_artifact, update_progress_artifact)
from pydantic import BaseModel, ConfigDict, Field

from flows.config import ConfigError, RunConfig, load_config, preflight, resolved
from flows.progress import run_logger
from flows.provenance import record_start
from flows.round.budget import BudgetSpent, spent_usd
from flows.round.context import RoundContext, RoundState, round_store
from flows.round.config import STAGES
from flows.round.lock import RunLock
from flows.round.next import first_state, next_round, repeats, search_repeats
from flows.round.reporting import ReportRecord
from flows.round.runner import StageRunner
from flows.store import RunStore, new_run_id


class RoundResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    t: int
    student: str
    report_path: str = ""
    promoted: bool | None = None
    decision: str = ""
    stopped: str = Field(default="", description="Why the round stopped after its search (its remaining stages "
                         "would repeat the previous round's), or '' when it ran every stage.")
    stages: list[dict[str, Any]] = Field(default_factory=list)
    server_restarts: list[dict[str, Any]] = Field(default_factory=list, description="Servers the round's server "
                                                  "scope restarted (server, stage, reason).")
    table: list[dict[str, str]] = Field(default_factory=list, description="The report's main table (success %).")


class RunResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    run_id: str
    run_dir: str
    status: str = Field(description="'done' or 'budget_spent' (resumable).")
    message: str = Field(default="", description="Why the run ended early: the budget, or a round that would repeat "
                         "the previous one (flows/round/next.py `repeats`, `search_repeats`).")
    rounds: list[RoundResult]
    spent_usd: float


def _one_round(ctx: RoundContext, from_stage: str | None, progress: Callable[[int], None],
               previous: RoundContext | None = None) -> RoundResult:
    """Round t's stages in order; after its search, stops early when the rest would repeat round t-1
    (flows/round/next.py `search_repeats`), then writes its report page saying so."""
    from flows.rollouts import slug

    runner = StageRunner(ctx, from_stage)
    with _servers(ctx) as servers:
        ctx.servers = servers
        for i, name in enumerate(ctx.r.stages):
            if ctx.stopped and name != "report":  # stopped: only the page of what ran, saying why the rest did not
                continue
            rec = runner.run(name)
            _artifact(slug("round", ctx.store.root.parent.parent.name, f"r{ctx.t}", name), name, rec)
            progress(i + 1)
            if name == "evolve" and (why := search_repeats(ctx, previous)):
                get_run_logger().warning(why)
                ctx.stopped = why
    gate, rep = runner.records.get("gate"), runner.records.get("report")
    if rep is not None:
        _report_artifacts(ctx.store.root.parent.parent.name, ctx.t, rep)
    return RoundResult(t=ctx.t, student=ctx.state.student_model, report_path=rep.report_path if rep else "",
                       promoted=gate.promoted if gate else None, stopped=ctx.stopped,
                       decision=ctx.stopped or (gate.reason if gate else f"no gate (stages: {', '.join(ctx.r.stages)})"),
                       stages=runner.log, server_restarts=[r.model_dump(mode="json") for r in servers.restarts],
                       table=rep.rows if rep else [])


def _servers(ctx: RoundContext) -> Any:
    from flows.servers import ModelServers

    return ModelServers(ctx.config, ctx.store.root / "logs" / "servers", ctx.base, logger=get_run_logger())


def _report_artifacts(run_id: str, t: int, rep: ReportRecord) -> None:
    """The round's report in the dashboard: the page (markdown), its pass@k and cost-per-row tables, its PNGs
    (links to the files)."""
    from flows.rollouts import slug

    create_markdown_artifact(markdown=rep.markdown[:100_000], key=slug("round-report", run_id, f"r{t}")[:120],
                             description=f"co-evolution round {t}: report")
    if rep.pass_k:
        create_table_artifact(table=[{k: str(v) for k, v in r.items()} for r in rep.pass_k],
                              key=slug("round-pass-k", run_id, f"r{t}")[:120],
                              description=f"round {t}: pass@1, pass@k, pass^k per row and family, 95% CIs")
    if rep.row_costs:
        create_table_artifact(table=[{k: str(v) for k, v in r.items()} for r in rep.row_costs],
                              key=slug("round-row-costs", run_id, f"r{t}")[:120],
                              description=f"round {t}: cost per row (API dollars, model-seconds, wall seconds)")
    for name, path in sorted(rep.plots.items()):
        create_link_artifact(link=Path(path).resolve().as_uri(), link_text=Path(path).name,
                             key=slug("round-plot", run_id, f"r{t}", name)[:120],
                             description=f"round {t}: {name} plot (a PNG beside report.md)")


def _artifact(key: str, stage: str, rec: BaseModel) -> None:
    rows = []
    for k, v in rec.model_dump(mode="json").items():
        if isinstance(v, dict) and v and all(isinstance(x, dict) for x in v.values()):
            for name, sub in v.items():
                rows.append({"item": f"{k}.{name}", **{a: str(b)[:120] for a, b in sub.items()
                                                        if not isinstance(b, (list, dict))}})
        elif not isinstance(v, (list, dict)):
            rows.append({"item": k, "value": str(v)[:300]})
    create_table_artifact(table=rows or [{"item": stage, "value": "done"}], key=key[:120],
                          description=f"round stage {stage}: its output record")


def run_rounds(config: RunConfig, rounds: int = 1, run_id: str | None = None, from_stage: str | None = None,
               base: Path | None = None) -> RunResult:
    """The rounds of one run under the run lock; see the module docstring."""
    if from_stage is not None and from_stage not in config.round.stages:
        raise ConfigError(f"--from-stage: '{from_stage}' is not a stage of this round; stages: "
                          f"{', '.join(config.round.stages)}")
    base = (base or Path.cwd()).resolve()
    preflight(config, base)
    _refuse_placement(config, base)
    run_id = run_id or new_run_id(config.name)
    run = RunStore(base / config.runs_dir, run_id)
    with RunLock(run.root):
        run.save_config(resolved(config))  # the merged config, every default filled
        moved = record_start(run.root, base)  # runs/<id>/code.json: the commit of this start
        if moved is not None:
            run_logger(logging.getLogger(__name__)).warning(moved)
        return _rounds_locked(config, run, rounds, from_stage, base)


def _refuse_placement(config: RunConfig, base: Path) -> None:
    """GPU placement and LoRA serving, refused before any server starts or any LoRA trains (flows/placement.py)."""
    from flows.placement import check_lora_serving, require_placement

    require_placement(config, base)
    errors, _ = check_lora_serving(config, base)
    if errors:
        raise ConfigError("\n".join(errors))


def _rounds_locked(config: RunConfig, run: RunStore, rounds: int, from_stage: str | None, base: Path) -> RunResult:
    from flows.rollouts import build_tiny_model, slug, start_ray

    import ray

    owns_ray = start_ray(config)
    results: list[RoundResult] = []
    message = ""
    state, cfg = first_state(config, run, base)
    previous: RoundContext | None = None
    per_round = len(config.round.stages)
    total = rounds * per_round
    pid = create_progress_artifact(progress=0.0, key=slug("round-progress", run.run_id),
                                   description=f"run {run.run_id}: stages finished of {total}")
    try:
        if config.tiny_model is not None:
            build_tiny_model(config, str(base))
        for k in range(rounds):
            ctx = RoundContext(config=cfg, store=round_store(run.root, state.t), base=base, state=state)
            done_before = k * per_round
            res = _one_round(ctx, from_stage if k == 0 else None,
                             lambda i: update_progress_artifact(pid, 100.0 * (done_before + i) / total), previous)
            results.append(res)
            run.mark_done("rounds", f"r{state.t}", res.model_dump(mode="json"))
            if res.stopped:
                message = f"{res.stopped} ({k + 1} of {rounds} rounds run, the last stopped after its search)"
                break
            if k + 1 < rounds:
                why = repeats(ctx)
                if why is not None:
                    message = f"{why} ({k + 1} of {rounds} rounds run)"
                    get_run_logger().warning(message)
                    break
                previous = ctx
                state, cfg = next_round(ctx, run)
        status = "done"
    except BudgetSpent as e:
        status, message = "budget_spent", str(e)
    finally:
        if owns_ray:
            ray.shutdown()
    _summary(run)
    return RunResult(run_id=run.run_id, run_dir=str(run.root.resolve()), status=status, message=message,
                     rounds=results, spent_usd=spent_usd(run.root))


def _summary(run: RunStore) -> None:
    from flows.round.reporting import write_summary

    rows = [{"t": v["t"], "student": v["student"], "decision": v["decision"], "report": v["report_path"]}
            for v in run.done("rounds").values()]
    write_summary(run.root, rows)


@flow(name="coevolution-round", flow_run_name="coevolution-round", log_prints=True)
def coevolution_round(config_path: str, rounds: int = 1, run_id: str | None = None,
                      from_stage: str | None = None) -> dict[str, Any]:
    """`rounds` co-evolution rounds from the config at `config_path` (a new run, or `run_id` resumed); the
    deployment's entry point (deploy/prefect.yaml)."""
    config = load_config(config_path)
    result = run_rounds(config, rounds, run_id, from_stage)
    get_run_logger().info("run %s: %s %s", result.run_id, result.status, result.message)
    return result.model_dump(mode="json")


@flow(name="coevolution-run", flow_run_name="coevolution-{run_id}", log_prints=True)
def coevolution_run(config: RunConfig, run_id: str, rounds: int = 1, from_stage: str | None = None,
                    base_dir: str | None = None) -> RunResult:
    """`coevo run`: the same rounds from a config already loaded (and overridden) by the command line."""
    result = run_rounds(config, rounds, run_id, from_stage, Path(base_dir) if base_dir else None)
    get_run_logger().info("run %s: %s %s", result.run_id, result.status, result.message)
    return result


__all__ = ["RoundResult", "RoundState", "RunResult", "STAGES", "coevolution_round", "coevolution_run", "run_rounds"]
