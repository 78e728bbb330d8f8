"""The `evolve_harness` stage: the harness search for one family, wired to the Ray rollout pool, plus its outputs.

    evolve_harness(settings, run_dir, base_dir)    # Prefect task; the round flow calls it per family
    evolution_flow(settings, run_dir, base_dir)    # `coevo evolve`: Ray, then evolve_harness

Outputs under `<run>/evolution/<family>/` (see harness/evolution/search.py for the search's own files):
`h_star.yaml`, `h0.yaml`, `lineage.jsonl`, `diff_h0_h_star.txt`, `summary.json`, `validation_curve.png`,
`cache.jsonl` (every evaluation by content key), `settings.json`; the full trajectories go to the run store
under `trajectories/evolve/<family>/`. Prefect artifacts: the accepted edits (table) and the curve.
A stage re-run with the same settings resumes: GEPA's state and the cache make it repeat no rollout.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import ray
from prefect import flow, get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact, create_table_artifact
from prefect.cache_policies import NONE
from pydantic import BaseModel, ConfigDict, Field, PositiveInt

import tasks
from agents.pool.driver import LOCAL_RAY_SYSTEM_CONFIG, RolloutPool
from agents.records import ModelRole, ToolChoice
from agents.jobs import Limits
from analysis.curves import step_curves
from analysis.stats import PairedDiff, paired_bootstrap
from flows.evolution_pool import ModelCompletion, PoolEvaluator, search_stage
from flows.progress import Progress, run_emitter
from flows.store import RunStore
from harness import Harness, baseline
from harness.evolution import (CachedEvaluator, EvolutionCandidate, ResultCache, SearchConfig, SearchResult,
                               items_for, make_reflector, parse_strategy, read_lineage, run_search)

log = logging.getLogger(__name__)


class TransferSettings(BaseModel):
    """Upward transfer: the expert on h0 and on h* on the test split, paired difference."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    expert: ModelRole = Field(description="The expert role; '{family}' in its model string is filled.")
    test_instances: int | None = Field(default=None, gt=0, description="First N test instances; null = all 60.")
    seeds: int = Field(default=3, ge=1)


class EvolveSettings(BaseModel):
    """Everything one family's search depends on (stored as settings.json; a resume must match it)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    family: str
    student: ModelRole = Field(description="The student role; '{family}' in its model string is filled.")
    reflector: str = Field(default="library", description="'library' or 'llm:MODEL'.")
    reflector_role: ModelRole | None = Field(default=None, description="Options for llm:MODEL (api_base, ...).")
    reflector_prompt_chars: int = Field(default=40_000, ge=4000, description="Prompt size cap of llm:MODEL "
                                        "(characters; fit it to the reflector's context window).")
    harness: str = Field(default="baseline", description="Start harness: 'baseline' (h0) or a harness file.")
    search: SearchConfig
    train_instances: int | None = Field(default=None, gt=0, description="First N train instances; null = all 20.")
    val_instances: int | None = Field(default=20, gt=0, description="First N val instances; null = all 20.")
    train_seeds: int = Field(default=1, ge=1, description="Rollout seeds per train instance.")
    val_seeds: int = Field(default=1, ge=1, description="Rollout seeds per val instance.")
    limits: Limits = Field(default_factory=Limits)
    tool_choice: ToolChoice | None = None
    actors: int = Field(default=2, ge=1)
    concurrency_per_server: int = Field(default=8, ge=1)
    family_limits: dict[str, PositiveInt] | None = Field(default=None,
                                                         description="The pool's family_limits (null: none).")
    transfer: TransferSettings | None = None

    def identity(self) -> dict[str, Any]:
        """What a resume must match: everything but where the models are served and how much runs at once."""
        data = self.model_dump(mode="json", exclude={"actors": True, "concurrency_per_server": True,
                                                      "family_limits": True, "search": {"concurrent_seeds"}})
        for role in ("student", "reflector_role"):
            if data.get(role):
                data[role].pop("api_base", None)
        if data.get("transfer"):
            data["transfer"]["expert"].pop("api_base", None)
        return data

    def student_role(self) -> ModelRole:
        return self.student.model_copy(update={"model": self.student.model.format(family=self.family)})

    def reflector_model_role(self) -> ModelRole | None:
        name, model = parse_strategy(self.reflector)
        if name != "llm":
            return None
        base = self.reflector_role or ModelRole(model=model or "")
        return base.model_copy(update={"model": model})


class TransferResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    expert: str
    h0_success: float
    h_star_success: float
    diff: PairedDiff
    stage: str = Field(description="Run-store stage of the expert's trajectories (for the trigger-rate scan).")


class EvolutionSummary(BaseModel):
    """What the stage returns (small, JSON-able)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    family: str
    out_dir: str
    search: SearchResult
    curve_png: str
    accepted_edits: list[dict[str, Any]]
    h_star_components: list[str] = Field(description="Harness.components() keys of h* (the trigger-rate scan's rows).")
    evolved_components: list[str] = Field(description="Components of h* that are new or changed against h0.")
    transfer: TransferResult | None = None


def evolution_dir(store: RunStore, family: str) -> Path:
    return store.root / "evolution" / family


def start_harness(settings: EvolveSettings, repo_root: Path) -> Harness:
    if settings.harness == "baseline":
        return baseline(settings.family)
    return Harness.load(repo_root / settings.harness)


def check_settings(out: Path, settings: EvolveSettings, resume: bool) -> None:
    """A new search needs a fresh directory; a resumed one the same settings (else its cache would lie)."""
    path = out / "settings.json"
    if path.exists() and not resume:
        raise FileExistsError(f"{out} already holds a search; resume it or choose another run directory")
    if resume and path.exists():
        stored, now = EvolveSettings.model_validate_json(path.read_text()).identity(), settings.identity()
        if stored != now:
            changed = sorted(k for k in set(stored) | set(now) if stored.get(k) != now.get(k))
            raise ValueError(f"{out}: the stored search has other settings ({', '.join(changed)}); a resume must "
                             "use the same ones")
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(settings.model_dump_json(indent=2))


def evolved_components(h0: Harness, h_star: Harness) -> list[str]:
    a, b = h0.components(), h_star.components()
    return sorted(k for k, v in b.items() if a.get(k) != v)


def accepted_edit_rows(lineage: list[EvolutionCandidate], best_id: str) -> list[dict[str, Any]]:
    """One row per edit of each accepted candidate; `in_h_star` marks the chain that leads to h*."""
    by_id = {c.harness_id: c for c in lineage if c.accepted}
    chain, cur = set(), by_id.get(best_id)
    while cur is not None and cur.parent_id is not None:
        chain.add(cur.harness_id)
        cur = by_id.get(cur.parent_id)
    rows = []
    for c in lineage:
        for pe in c.edits if c.accepted else []:
            rows.append({"seed": c.search_seed, "iteration": c.iteration, "candidate": c.harness_id,
                         "op": pe.edit.op, "rationale": pe.rationale[:200],
                         "minibatch": f"{sum(c.parent_minibatch_scores):.2f} -> {sum(c.minibatch_scores):.2f}",
                         "val_mean": round(c.val_mean or 0.0, 4), "in_h_star": c.harness_id in chain})
    return rows


class SearchProgress:
    """A gepa callback: evaluations spent over all search seeds (run at once or in turn) vs their budget, as
    `flows.progress` lines."""

    def __init__(self, family: str, config: SearchConfig, emit: Callable[[str], object]) -> None:
        self.total = config.budget_rollouts * config.seeds
        self.ticker = Progress(f"{family} search evaluations", self.total, emit=emit)
        self.used: dict[int, int] = {}  # search seed -> evaluations it has spent
        self._lock = threading.Lock()

    def on_budget_updated(self, event: Any) -> None:
        with self._lock:
            self.used[int(event.get("search_seed", 0))] = int(event["metric_calls_used"])
            self.ticker.update(min(sum(self.used.values()), self.total - 1))  # the last line comes from done()

    def done(self) -> None:
        self.ticker.update(self.total)


def run_evolution(settings: EvolveSettings, store: RunStore, repo_root: Path, pool: RolloutPool,
                  resume: bool = False) -> EvolutionSummary:
    """The search for one family on `pool`, then its curve, the upward transfer (when set) and the summary."""
    out = evolution_dir(store, settings.family)
    check_settings(out, settings, resume)
    fam = settings.family
    train = items_for(tasks.instances(fam, "train", settings.train_instances), range(settings.train_seeds))
    val = items_for(tasks.instances(fam, "val", settings.val_instances), range(settings.val_seeds))
    inner = PoolEvaluator(pool, settings.student_role(), settings.limits, store, search_stage(fam), settings.tool_choice)
    evaluator = CachedEvaluator(inner, ResultCache(out / "cache.jsonl"))
    role = settings.reflector_model_role()
    reflector = make_reflector(settings.reflector, fam, ModelCompletion(role) if role else None,
                               max_prompt_chars=settings.reflector_prompt_chars)
    h0 = start_harness(settings, repo_root)
    progress = SearchProgress(fam, settings.search, run_emitter(log))
    result = run_search(h0, train, val, evaluator, reflector, settings.search, out, callbacks=[progress])
    progress.done()
    h_star = Harness.load(result.h_star_path)
    lineage = read_lineage(out / "lineage.jsonl")
    curve = step_curves({f"seed {s.search_seed}": s.curve for s in result.seeds}, out / "validation_curve.png",
                        title=f"{fam}: best validation score vs evaluations ({reflector.name})",
                        xlabel="evaluations spent (rollouts requested)", ylabel="validation mean score")
    transfer = None
    if settings.transfer is not None:
        transfer = upward_transfer(settings, store, pool, h0, h_star)
    summary = EvolutionSummary(family=fam, out_dir=str(out), search=result, curve_png=str(curve),
                               accepted_edits=accepted_edit_rows(lineage, result.best_id),
                               h_star_components=sorted(h_star.components()),
                               evolved_components=evolved_components(h0, h_star), transfer=transfer)
    # Trigger-rate scan (analysis/, w/attribution): per component in `summary.h_star_components`, the share of
    # rollouts in which it fired, per (model, harness) pair; the expert's rollouts on h0 and h* are in the run
    # store under `summary.transfer.stage`. This is where the stage calls it once it lands.
    (out / "evolution_summary.json").write_text(summary.model_dump_json(indent=2))
    return summary


def upward_transfer(settings: EvolveSettings, store: RunStore, pool: RolloutPool, h0: Harness,
                    h_star: Harness) -> TransferResult:
    """The expert on h0 and on h* on the test split (cached like the search's evaluations), paired difference."""
    t = settings.transfer
    assert t is not None
    fam = settings.family
    expert = t.expert.model_copy(update={"model": t.expert.model.format(family=fam)})
    stage = f"evolve-transfer/{fam}"
    items = items_for(tasks.instances(fam, "test", t.test_instances), range(t.seeds))
    ev = CachedEvaluator(PoolEvaluator(pool, expert, settings.limits, store, stage, tag="transfer"),
                         ResultCache(evolution_dir(store, fam) / "transfer_cache.jsonl"))
    results = ev.evaluate_many([(h0, items), (h_star, items)])  # one parallel batch
    rows = [{"pair": name, "family": fam, "instance_id": r.instance_id, "seed": r.seed, "passed": r.passed}
            for name, rs in zip(("h0", "h*"), results, strict=True) for r in rs]
    schema = {"pair": pl.String(), "family": pl.String(), "instance_id": pl.String(), "seed": pl.Int64(),
              "passed": pl.Boolean()}
    frame = pl.DataFrame(rows, schema=schema)
    rate = {p: float(frame.filter(pl.col("pair") == p)["passed"].mean() or 0.0) for p in ("h0", "h*")}
    return TransferResult(expert=expert.model, h0_success=rate["h0"], h_star_success=rate["h*"],
                          diff=paired_bootstrap(frame, "h*", "h0", family=fam), stage=stage)


def _artifacts(summary: EvolutionSummary, run_id: str) -> None:
    from flows.rollouts import slug

    key = slug("evolution", run_id, summary.family)
    rows = summary.accepted_edits or [{"op": "(none)", "rationale": "no edit was accepted"}]
    create_table_artifact(table=rows, key=f"{key}-edits"[:120],
                          description=f"{summary.family}: accepted edits (h* = {summary.search.best_id})")
    lines = [f"# {summary.family}: validation curve", "", f"h0 {summary.search.h0_val_mean:.3f} -> h* "
             f"{summary.search.best_val_mean:.3f} (seed {summary.search.best_seed}); PNG: {summary.curve_png}", "",
             "| seed | evaluations | best val mean |", "|---|---|---|"]
    lines += [f"| {s.search_seed} | {x} | {y:.3f} |" for s in summary.search.seeds for x, y in s.curve]
    create_markdown_artifact(markdown="\n".join(lines), key=f"{key}-curve"[:120],
                             description=f"{summary.family}: best validation score vs evaluations spent")
    create_link_artifact(link=Path(summary.curve_png).resolve().as_uri(), link_text="validation_curve.png",
                         key=f"{key}-curve-png"[:120])


@task(name="evolve_harness", cache_policy=NONE)
def evolve_harness(settings: EvolveSettings, run_dir: str, base_dir: str, resume: bool = True,
                   ray_address: str | None = None, num_cpus: int | None = 2) -> EvolutionSummary:
    """One family's harness search (resumes where an earlier attempt stopped) and its artifacts."""
    store = RunStore.open_existing(Path(run_dir).parent, Path(run_dir).name)
    pool = RolloutPool(settings.actors, address=ray_address, num_cpus=num_cpus,
                       concurrency_per_server=settings.concurrency_per_server, family_limits=settings.family_limits)
    try:
        summary = run_evolution(settings, store, Path(base_dir), pool, resume=resume)
    finally:
        pool.shutdown()
    _artifacts(summary, store.run_id)
    s = summary.search
    get_run_logger().info("%s: h0 %.3f -> h* %.3f (%s); %d rollouts run, %d evaluations from the cache",
                          settings.family, s.h0_val_mean, s.best_val_mean, s.best_id, s.evaluations_run,
                          s.evaluations_cached)
    return summary


@flow(name="evolution", flow_run_name="evolution-{settings.family}", log_prints=True)
def evolution_flow(settings: EvolveSettings, run_dir: str, base_dir: str, resume: bool = False,
                   ray_address: str | None = None) -> EvolutionSummary:
    """`coevo evolve`: a local Ray (or the cluster at `ray_address`) and the evolve_harness stage."""
    owns_ray = False
    if not ray.is_initialized():
        if ray_address:
            ray.init(address=ray_address, log_to_driver=False)
        else:
            ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING,
                     _system_config=LOCAL_RAY_SYSTEM_CONFIG)
        owns_ray = True
    try:
        return evolve_harness(settings, run_dir, base_dir, resume=resume, ray_address=ray_address)
    finally:
        if owns_ray:
            ray.shutdown()


def load_summary(out_dir: str | Path) -> EvolutionSummary:
    return EvolutionSummary.model_validate(json.loads((Path(out_dir) / "evolution_summary.json").read_text()))


__all__ = ["EvolutionSummary", "EvolveSettings", "TransferSettings", "evolution_flow",
           "evolve_harness", "load_summary", "run_evolution"]
