"""The harness search: GEPA (gepa 0.1.4) over typed harness edits, N search seeds, h* = best validation mean.

    result = run_search(h0, train_items, val_items, CachedEvaluator(evaluator, ResultCache(path)),
                        make_reflector("library", family), SearchConfig(family=..., budget_rollouts=...), out_dir)

Per search seed, one `gepa.optimize` run: candidates are whole harnesses (adapter.py); each iteration picks a
parent from the instance-level Pareto front of validation scores, samples a minibatch of `minibatch_size`
train items, runs the parent on it, asks the reflector for typed edits (proposer.py), runs the child on the
same minibatch and accepts it only if its minibatch score sum is strictly higher; an accepted child is run on
the whole validation set and joins the pool. Budgets (each per search seed): evaluations (GEPA's
`max_metric_calls`: one per (harness, instance, seed) the search asks for, whether it ran now or came from the
cache, so a resumed search counts exactly as an uninterrupted one), reflector dollars (GEPA's
reflection-cost stopper) and wall time. GEPA's state lives in `<out>/seed<k>/gepa/`: a killed search resumes
from it, and the result cache answers every evaluation that had finished, so no rollout runs twice.

The search seeds run concurrently (one thread each, `concurrent_seeds`): GEPA's loop is synchronous (a parent's
minibatch, then the child's, then validation), so one seed leaves the rollout pool idle while its batch waits
for its slowest episode; three seeds keep three batches in flight on the same pool. Each seed's GEPA run is
the same as alone (its own state, sampler and RNG); the shared cache runs an evaluation two seeds ask for at
once only once. Callbacks receive each event with the seed added (`event["search_seed"]`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import gepa
from gepa.core.state import GEPAState
from gepa.strategies.proposal_sampling import IndependentSampling
from gepa.utils import MaxReflectionCostStopper
from pydantic import BaseModel, ConfigDict, Field

from harness.diffs import diff
from harness.evolution.adapter import HarnessAdapter, decode, encode
from harness.evolution.cache import CachedEvaluator
from harness.evolution.guard import EditGuard
from harness.evolution.lineage import build_lineage, reconstruct, validation_curve, write_lineage
from harness.evolution.proposer import EditProposer, read_ledger
from harness.evolution.protocols import Reflector
from harness.evolution.records import EvalItem, EvolutionCandidate, ProposalBudget
from harness.evolution.sampling import EpochSampler, InformativeSampler, ParetoSelector
from harness.program import Harness

log = logging.getLogger(__name__)


class SearchConfig(BaseModel):
    """How one family's harness search runs. Budgets are per search seed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    family: str
    seeds: int = Field(default=3, ge=1, description="Search seeds 0..N-1 (independent GEPA runs); h* = best of all.")
    minibatch_size: int = Field(default=3, ge=1, description="Train items per reflection minibatch.")
    proposals_per_iteration: int = Field(default=1, ge=1, description="Parents (each with its own minibatch) "
                                         "per iteration; their rollouts run as one batch, keeping the pool busy.")
    budget_rollouts: int = Field(ge=1, description="Evaluations per search seed (GEPA's max_metric_calls).")
    budget_reflector_usd: float | None = Field(default=None, gt=0, description="Reflector dollars per search seed.")
    budget_wall_s: float | None = Field(default=None, gt=0, description="Wall seconds per search seed.")
    max_edits: int = Field(default=2, ge=1, description="Edits per proposal.")
    max_retries: int = Field(default=2, ge=0, description="Times an invalid llm answer is sent back with its error.")
    acceptance: Literal["strict_improvement", "improvement_or_equal"] = "strict_improvement"
    minibatch_sampler: Literal["epoch", "informative"] = Field(
        default="epoch", description="'epoch': GEPA's epoch-shuffled minibatches; 'informative': weighted toward "
        "train instances whose score the search has seen vary (sampling.InformativeSampler).")
    concurrent_seeds: bool = Field(default=True, description="Run the search seeds at once on the shared "
                                   "evaluator (keeps the pool busy); False runs them one after another.")


class SeedSummary(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    search_seed: int
    best_id: str
    best_val_mean: float
    candidates: int = Field(description="Candidates in GEPA's pool (h0 included).")
    iterations: int
    evaluations: int = Field(description="GEPA's metric calls (evaluations asked for, cached or not).")
    reflector_cost_usd: float
    counts: dict[str, int] = Field(description="Proposer counters: proposals, children, failed_proposals, "
                                               "edits_proposed/applied/rejected, reflector_errors.")
    curve: list[tuple[int, float]]


class SearchResult(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    family: str
    reflector: str
    h0_id: str
    h0_val_mean: float
    best_id: str
    best_seed: int
    best_val_mean: float
    seeds: list[SeedSummary]
    out_dir: str
    evaluations_run: int = Field(description="Rollouts actually run in this call (cache misses).")
    evaluations_cached: int = Field(description="Evaluations answered from the cache in this call.")

    @property
    def h_star_path(self) -> Path:
        return Path(self.out_dir) / "h_star.yaml"


class _FileLogger:
    """GEPA's log lines go to a file (and debug logging), never to stdout."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)

    def log(self, message: str, *args: Any, **kwargs: Any) -> None:
        with self.path.open("a") as f:
            f.write(f"{time.strftime('%H:%M:%S')} {message}\n")
        log.debug("gepa: %s", message)


class _ForSeed:
    """A gepa callback that forwards every `on_*` event to `inner` with `search_seed` added."""

    def __init__(self, inner: Any, seed: int) -> None:
        self.inner, self.seed = inner, seed

    def __getattr__(self, name: str) -> Callable[[Any], None]:
        method = getattr(self.inner, name) if name.startswith("on_") else None
        if method is None:
            raise AttributeError(name)
        return lambda event: method({**event, "search_seed": self.seed})


class _Deadline:
    """Stop once wall time since the first check of this process passes `seconds` (GEPA stopper)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.start = time.monotonic()

    def __call__(self, state: Any) -> bool:
        return time.monotonic() - self.start > self.seconds


def check_budget(config: SearchConfig, n_train: int, n_val: int) -> None:
    """A budget that cannot pay for one validation pass plus one proposal is a config error, named."""
    if n_train < 1 or n_val < 1:
        raise ValueError(f"the search needs train and validation items (got {n_train} train, {n_val} val)")
    need = n_val + 2 * config.minibatch_size * config.proposals_per_iteration
    if config.budget_rollouts < need:
        raise ValueError(f"budget_rollouts {config.budget_rollouts} cannot pay for one validation pass ({n_val}) "
                         f"and one iteration (2 x minibatch {config.minibatch_size} x {config.proposals_per_iteration} "
                         f"proposals); give at least {need}")


def _batch_sampler(config: SearchConfig, seed: int) -> EpochSampler | InformativeSampler:
    if config.minibatch_sampler == "informative":
        return InformativeSampler(config.minibatch_size, seed)
    return EpochSampler(config.minibatch_size, seed, config.proposals_per_iteration)


def _run_seed(h0: Harness, train: Sequence[EvalItem], val: Sequence[EvalItem], evaluator: CachedEvaluator,
              reflector: Reflector, config: SearchConfig, seed: int, seed_dir: Path,
              callbacks: Sequence[Any] = (), guard: EditGuard | None = None) -> list[EvolutionCandidate]:
    """One GEPA run (resumed from `seed_dir/gepa` when it exists); returns its lineage."""
    budget = ProposalBudget(max_edits=config.max_edits, max_retries=config.max_retries)
    proposer = EditProposer(reflector, config.family, budget, seed, seed_dir / "proposals.jsonl",
                            max_cost_usd=config.budget_reflector_usd, guard=guard)
    stoppers: list[Any] = []
    if config.budget_reflector_usd is not None:
        stoppers.append(MaxReflectionCostStopper(config.budget_reflector_usd, reflection_lm=proposer))
    if config.budget_wall_s is not None:
        stoppers.append(_Deadline(config.budget_wall_s))
    run_dir = seed_dir / "gepa"
    gepa.optimize(
        seed_candidate=encode(h0), trainset=list(train), valset=list(val),
        adapter=HarnessAdapter(evaluator, config.family, persist=proposer),
        custom_candidate_proposer=proposer, candidate_selection_strategy=ParetoSelector(seed),
        batch_sampler=_batch_sampler(config, seed),
        sampling_strategy=IndependentSampling(config.proposals_per_iteration) if config.proposals_per_iteration > 1
        else None, frontier_type="instance",
        acceptance_criterion=config.acceptance, max_metric_calls=config.budget_rollouts,
        stop_callbacks=stoppers or None, run_dir=str(run_dir),
        callbacks=[proposer, *(_ForSeed(cb, seed) for cb in callbacks)],
        logger=_FileLogger(seed_dir / "search_log.txt"), seed=seed, skip_perfect_score=True, perfect_score=1.0,
        use_merge=False, cache_evaluation=False, track_best_outputs=False, raise_on_exception=True,
    )
    state = GEPAState.load(str(run_dir))
    return build_lineage(state, read_ledger(seed_dir / "proposals.jsonl"), seed,
                         [i.label for i in train], [i.label for i in val])


def _summary(seed: int, seed_dir: Path, lineage: list[EvolutionCandidate]) -> SeedSummary:
    state = GEPAState.load(str(seed_dir / "gepa"))
    means = list(state.program_full_scores_val_set)
    best_idx = max(range(len(means)), key=lambda i: (means[i], -i))
    counts = {k: int(v) for k, v in state.adapter_state.get("counts", {}).items()}
    return SeedSummary(search_seed=seed, best_id=decode(state.program_candidates[best_idx]).id,
                       best_val_mean=float(means[best_idx]), candidates=len(means), iterations=state.i + 1,
                       evaluations=int(state.total_num_evals),
                       reflector_cost_usd=float(state.adapter_state.get("total_cost", 0.0)), counts=counts,
                       curve=validation_curve(lineage, int(state.total_num_evals)))


def run_search(h0: Harness, train: Sequence[EvalItem], val: Sequence[EvalItem], evaluator: CachedEvaluator,
               reflector: Reflector, config: SearchConfig, out_dir: str | Path,
               callbacks: Sequence[Any] = (), guard: EditGuard | None = None) -> SearchResult:
    """All search seeds (each resumed where it stopped), then h*, the lineage and the diff in `out_dir`.

    `callbacks`: extra gepa callbacks (objects with any of gepa's `on_*` methods, e.g. a progress display).
    `guard`: what screens every proposed edit (guard.py); default: `EditGuard.for_search` over the train and
    validation instances, so an edit that copies their data is refused and logged in the proposal ledger.
    """
    check_budget(config, len(train), len(val))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    h0.dump(out / "h0.yaml")
    hits0, misses0 = evaluator.hits, evaluator.misses
    if guard is None:
        seen = {i.instance.id: i.instance for i in [*train, *val]}
        guard = EditGuard.for_search(h0, config.family, list(seen.values()))

    def one(seed: int) -> list[EvolutionCandidate]:
        return _run_seed(h0, train, val, evaluator, reflector, config, seed, out / f"seed{seed}", callbacks, guard)

    if config.concurrent_seeds and config.seeds > 1:
        with ThreadPoolExecutor(max_workers=config.seeds, thread_name_prefix="search-seed") as ex:
            per_seed = list(ex.map(one, range(config.seeds)))
    else:
        per_seed = [one(seed) for seed in range(config.seeds)]
    lineage = [c for seed_lineage in per_seed for c in seed_lineage]
    seeds = [_summary(seed, out / f"seed{seed}", per_seed[seed]) for seed in range(config.seeds)]
    best = max(seeds, key=lambda s: (s.best_val_mean, -s.search_seed))
    h_star = reconstruct(h0, lineage, best.best_id)
    h_star.model_copy(update={"name": f"h*/{config.family}"}).dump(out / "h_star.yaml")
    write_lineage(out / "lineage.jsonl", lineage)
    (out / "diff_h0_h_star.txt").write_text(diff(h0, h_star) or "h* = h0: no accepted edit beat h0 on validation\n")
    result = SearchResult(family=config.family, reflector=reflector.name, h0_id=h0.id,
                          h0_val_mean=lineage[0].val_mean or 0.0, best_id=best.best_id, best_seed=best.search_seed,
                          best_val_mean=best.best_val_mean, seeds=seeds, out_dir=str(out),
                          evaluations_run=evaluator.misses - misses0, evaluations_cached=evaluator.hits - hits0)
    (out / "summary.json").write_text(json.dumps(result.model_dump(mode="json"), indent=2))
    return result
