"""The stages of one co-evolution round, as functions of typed records (flows/round/flow.py runs them in order,
stores each output record in the round's state.json under its content key, and skips it on resume).

    evaluate_pairs   the `evaluation.pairs` (any roles, adapters, harnesses), test split; only when listed
    evaluate_h0      M_t and the expert on h0, test split
    evolve           h*_t per family: the harness search around M_t from the round's start harness
    evaluate_h_star  M_t and the expert on h*_t, test split (upward transfer; the trigger scan reads them); from round
                     1 on (start harness h*_{t-1}), also M_t on h*_{t-1}: what this round's search changed
    arm_data         train-split rollouts -> imitation sets under h0 and h*_t, the correction set under h*_t
    train            LoRA per arm x training seed
    evaluate_arms    the adapters (hot-loaded as student@r{t+1}-<arm>-s<seed>) on the test split
    attribute        failure attribution per pair, composition, trigger rates, fit
    gate             the promotion gate (flows/round/gate.py)
    report           the round's page (analysis/round_report.py)
"""

from __future__ import annotations

import asyncio
import random
import shutil
from pathlib import Path
from typing import Any

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from agents.records import ModelRole, Trajectory
from analysis.attribution import Attributor, make_attributor
from analysis.attribution.batch import attribute_batch
from analysis.attribution.records import read_attribution_frame, write_attribution_frame
from analysis.report_sections import composition_section, fit_section, trigger_section
from flows.config import AttributionConfig, EvalPair
from flows.evolution import EvolveSettings, evolve_harness
from flows.rollouts import slug
from flows.round.config import ARMS, adapter_name
from flows.round.context import PairPlan, RoundContext
from flows.round.eval import EvalRecord, evaluate_pairs, trajectories_of
from flows.round.train import TrainRecord
from flows.store import content_key
from harness.evolution import SearchConfig

BASE_PAIRS = ("M_t.h0", "expert.h0", "M_t.hstar", "expert.hstar", "M_t.hstart")
ARM_HARNESS = {"imit_h0": "h0", "imit": "hstar", "corr": "hstar", "self": "hstar"}


class EvalStage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    pairs: dict[str, EvalRecord]


def evaluate_base(ctx: RoundContext, which: str, harness: str) -> EvalStage:
    ev = ctx.config.evaluation
    h = "h0" if which == "h0" else "h*"
    pairs = [PairPlan(name=f"M_t.{which}", role=ctx.student(), harness=harness, label=f"M_t {h}"),
             PairPlan(name=f"expert.{which}", role=ctx.expert(), harness=harness, label=f"expert {h}")]
    if which == "hstar" and ctx.state.start_harness != "baseline":  # round t >= 1: M_t on h*_{t-1} beside h*_t
        pairs.append(PairPlan(name="M_t.hstart", role=ctx.student(), harness=ctx.state.start_harness,
                              label="M_t h*_{t-1}"))
    return EvalStage(pairs=evaluate_pairs(ctx, pairs, ev.split, ev.n_instances, ev.seeds))


PAIRS_PREFIX = "pairs."


def config_pair(ctx: RoundContext, pair: EvalPair) -> PairPlan:
    """One `evaluation.pairs` entry as a round pair: `pairs.<slug of its label>`, the role (or its adapter)."""
    harness = pair.harness if pair.harness == "baseline" else str((ctx.base / pair.harness).resolve())
    return PairPlan(name=PAIRS_PREFIX + slug(pair.name), role=ctx.config.role_template(pair.model, pair.adapter),
                    harness=harness, label=pair.name, tool_choice=pair.tool_choice)


def evaluate_config_pairs(ctx: RoundContext) -> EvalStage:
    """The `evaluation.pairs` side by side on the test split (the nightly job, an on-demand evaluation)."""
    ev = ctx.config.evaluation
    pairs = [config_pair(ctx, p) for p in ev.pairs]
    names = [p.name for p in pairs]
    clash = sorted({n for n in names if names.count(n) > 1})
    if clash:
        raise ValueError(f"evaluation.pairs: labels that differ only in punctuation share the store name {clash[0]}; "
                         "give them distinct `label`s")
    return EvalStage(pairs=evaluate_pairs(ctx, pairs, ev.split, ev.n_instances, ev.seeds))


# --- evolve ---------------------------------------------------------------------------------------

class FamilySearch(BaseModel):
    model_config = ConfigDict(extra="forbid")

    h_star_id: str
    h0_val: float
    best_val: float
    evaluations_run: int
    evaluations_cached: int
    reflector_cost_usd: float
    accepted_edits: list[dict[str, Any]]
    out_dir: str


class EvolveRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    h_star_dir: str
    families: dict[str, FamilySearch]


def evolve_settings(ctx: RoundContext, family: str) -> EvolveSettings:
    s = ctx.r.search
    start = "baseline" if ctx.state.start_harness == "baseline" else str(Path(ctx.state.start_harness) / f"{family}.yaml")
    reflector_role: ModelRole | None = ctx.config.models.get("reflector") if s.reflector.startswith("llm") else None
    search = SearchConfig(family=family, seeds=s.seeds, minibatch_size=s.minibatch_size,
                          budget_rollouts=s.budget_rollouts, budget_reflector_usd=s.budget_reflector_usd,
                          max_edits=s.max_edits, minibatch_sampler=s.minibatch_sampler)
    return EvolveSettings(family=family, student=ctx.student(), reflector=s.reflector, reflector_role=reflector_role,
                          harness=start, search=search, train_instances=s.train_instances,
                          val_instances=s.val_instances, train_seeds=s.train_seeds, val_seeds=s.val_seeds,
                          limits=ctx.config.limits, actors=ctx.config.ray.actors,
                          family_limits=ctx.config.ray.family_limits,
                          concurrency_per_server=ctx.config.ray.concurrency_per_server)


def evolve(ctx: RoundContext) -> EvolveRecord:
    """The search per family, concurrently (each resumed from its GEPA state and cache); h*_t copied to
    `<round>/h_star/<family>.yaml`."""
    out: dict[str, FamilySearch] = {}
    ctx.h_star_dir.mkdir(parents=True, exist_ok=True)
    # the families concurrently (Prefect's thread pool): each search's pool has its own actors (num_cpus=0) on the
    # run's Ray cluster and model servers, so one family's reflection overlaps another's rollouts
    futures = {fam: evolve_harness.submit(evolve_settings(ctx, fam), str(ctx.store.root), str(ctx.base), resume=True,
                                          ray_address=ctx.config.ray.address, num_cpus=ctx.config.ray.num_cpus)
               for fam in ctx.families()}
    for fam, future in futures.items():
        summary = future.result()
        s = summary.search
        shutil.copyfile(s.h_star_path, ctx.h_star_dir / f"{fam}.yaml")
        out[fam] = FamilySearch(h_star_id=s.best_id, h0_val=s.h0_val_mean, best_val=s.best_val_mean,
                                evaluations_run=s.evaluations_run, evaluations_cached=s.evaluations_cached,
                                reflector_cost_usd=sum(x.reflector_cost_usd for x in s.seeds),
                                accepted_edits=summary.accepted_edits, out_dir=summary.out_dir)
    return EvolveRecord(h_star_dir=str(ctx.h_star_dir.resolve()), families=out)


# --- trained arms ----------------------------------------------------------------------------------

def arm_pairs(ctx: RoundContext, trained: TrainRecord, h_star: str) -> list[PairPlan]:
    pairs = []
    for arm in ARMS:
        rec = trained.arms.get(arm)
        for seed in sorted(rec.adapters) if rec else []:
            h = ARM_HARNESS[arm]
            pairs.append(PairPlan(name=f"{arm}.s{seed}.{h}", role=ctx.student(adapter_name(ctx.t, arm, seed)),
                                  harness="baseline" if h == "h0" else h_star,
                                  label=f"{arm} s{seed} {'h0' if h == 'h0' else 'h*'}"))
    return pairs


def evaluate_arms(ctx: RoundContext, trained: TrainRecord, h_star: str) -> EvalStage:
    ev = ctx.config.evaluation
    pairs = arm_pairs(ctx, trained, h_star)
    return EvalStage(pairs=evaluate_pairs(ctx, pairs, ev.split, ev.n_instances, ev.seeds) if pairs else {})


def grouped(tests: dict[str, EvalRecord]) -> dict[str, list[EvalRecord]]:
    """Report groups: the base pairs as they are, each arm's training seeds together (`corr.hstar`, ...)."""
    out: dict[str, list[EvalRecord]] = {}
    for name, rec in tests.items():
        parts = name.split(".")
        key = name if name in BASE_PAIRS else f"{parts[0]}.{parts[-1]}"
        out.setdefault(key, []).append(rec)
    return out


# --- attribute ------------------------------------------------------------------------------------

class SectionRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str
    title: str
    markdown: str
    rows: list[dict[str, Any]] = Field(default_factory=list)
    plot: str | None = None


class AttributeRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    attributor: str
    failing: dict[str, int]
    files: dict[str, str]
    sections: list[SectionRecord]
    at_risk: list[str]


def build_attributor(a: AttributionConfig, judge_role: ModelRole | None = None) -> Attributor:
    """'judge' alone uses the run's `judge` role; 'judge:MODEL' a model string; 'heuristic' needs nothing."""
    if a.attributor == "judge":
        if judge_role is None:
            raise ValueError("attribution.attributor: 'judge' needs a `judge` role under `models` (or use judge:MODEL)")
        return make_attributor(f"judge:{judge_role.model}", api_base=judge_role.api_base,
                               max_tokens=judge_role.max_tokens)
    return make_attributor(a.attributor)


def attribute(ctx: RoundContext, tests: dict[str, EvalRecord]) -> AttributeRecord:
    """Every failing test rollout of every group gets a category; composition, trigger rates, fit."""
    a = ctx.config.attribution or AttributionConfig()
    attributor = build_attributor(a, ctx.config.models.get("judge"))
    groups = grouped(tests)
    by_group: dict[str, list[Trajectory]] = {g: trajectories_of(ctx.store, recs) for g, recs in groups.items()}
    frames, files, failing = [], {}, {}
    for g, trajs in by_group.items():
        path = ctx.store.path("attributions", f"{g}-{content_key(sorted(t.id for t in trajs), attributor.name)}.parquet")
        if not path.exists():
            batch = asyncio.run(attribute_batch(trajs, attributor, pair_of=lambda t, g=g: g, concurrency=a.concurrency))
            write_attribution_frame(path, batch.frame)
        frame = read_attribution_frame(path)
        files[g], failing[g] = str(path), frame.height
        frames.append(frame.with_columns(pl.lit(g).alias("pair")))
    order = list(by_group)
    n_boot = a.bootstrap_samples
    configured = [g for g in order if g.startswith(PAIRS_PREFIX)]  # the first configured pair is their reference
    shifts = [("M_t.hstar", "imit.hstar"), ("M_t.hstar", "corr.hstar"), ("M_t.hstar", "self.hstar"),
              ("M_t.h0", "imit_h0.h0"),
              *((configured[0], g) for g in configured[1:])]
    sections = []
    if frames and sum(f.height for f in frames):
        sections.append(composition_section(pl.concat(frames, how="diagonal_relaxed"), order, random.Random(a.seed),
                                            shifts=shifts, n_boot=n_boot))
    sections.append(trigger_section(by_group, order))
    fit = fit_section(by_group, "M_t.hstar", "expert.hstar", a.fit) if "M_t.hstar" in by_group else None
    at_risk = sorted({r["pair"] for r in fit.rows if r["family"] == "overall" and r["at_risk"]}) if fit else []
    sections += [fit] if fit else []
    return AttributeRecord(attributor=attributor.name, failing=failing, files=files, at_risk=at_risk,
                           sections=[SectionRecord(**s.model_dump()) for s in sections])
