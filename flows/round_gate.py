"""The promotion gate of round t: does the correction arm's adapter become M_{t+1}?

1. M_t and every correction seed under h*_t on the validation split (`round.gate.val_instances` x `val_seeds`).
2. The seed with the best validation mean is the candidate.
3. Paired bootstrap (analysis/stats.py) of candidate - M_t over (instance, seed) units: the candidate is refused
   when its CI lies wholly below 0 (significantly worse). Under the default rule `gain` it is also refused when
   its validation mean is not above M_t's ("not promoted: no gain": promoting no-ops accumulates drift round
   after round); `round.gate.rule: non_inferior` keeps non-inferiority alone.
4. The fit monitor (analysis/fit.py `fit_alarm`) on the test rollouts under h*_t: candidate vs M_t (and the
   expert); a flag refuses it unless `round.gate.allow_fit_risk`.
5. Promoted: merged into M_t's weights (training/merge.py) as `<round>/merged/student-r{t+1}`, a promotion row
   per family in the registry (`<runs_dir>/registry.sqlite`). Every decision, kept or not, is a registry row.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from analysis.fit import FitConfig, fit_alarm
from analysis.gate import promotion_rule
from analysis.stats import paired_bootstrap
from flows.registry import GateDecision, Promotion, PromotionRegistry
from flows.round_config import adapter_name
from flows.round_context import PairPlan, RoundContext
from flows.round_eval import EvalRecord, evaluate_pairs, frame_of, trajectories_of
from flows.round_train import TrainRecord
from harness.program import Harness


class GateRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    promoted: bool
    reason: str
    candidate: str = ""
    best_seed: int | None = None
    val: dict[str, float] = Field(default_factory=dict, description="Validation success per pair.")
    diff: dict[str, Any] = Field(default_factory=dict, description="PairedDiff candidate - M_t (validation).")
    fit: dict[str, Any] = Field(default_factory=dict, description="FitEvidence of the candidate (test, under h*).")
    fit_flag: bool | None = None
    merged_dir: str = ""
    next_student: str = ""


def _val_pairs(ctx: RoundContext, h_star: str, seeds: list[int]) -> list[PairPlan]:
    pairs = [PairPlan(name="val.M_t.hstar", role=ctx.student(), harness=h_star, label="M_t h* (val)")]
    pairs += [PairPlan(name=f"val.corr.s{k}.hstar", role=ctx.student(adapter_name(ctx.t, "corr", k)), harness=h_star,
                       label=f"correction s{k} h* (val)") for k in seeds]
    return pairs


def _decide(ctx: RoundContext, val: dict[str, EvalRecord], best: int, tests: dict[str, EvalRecord]) -> GateRecord:
    g = ctx.r.gate
    frame = frame_of(ctx.store, list(val.values()))
    cand = f"val.corr.s{best}.hstar"
    diff = paired_bootstrap(frame, cand, "val.M_t.hstar", n_boot=g.bootstrap_samples, confidence=g.confidence)
    fit_cfg = ctx.config.attribution.fit if ctx.config.attribution else FitConfig()
    trained = trajectories_of(ctx.store, [tests[f"corr.s{best}.hstar"]])
    flag, ev = fit_alarm(trained, trajectories_of(ctx.store, [tests["M_t.hstar"]]),
                         trajectories_of(ctx.store, [tests["expert.hstar"]]), fit_cfg)
    verdict = promotion_rule(diff, val[cand].success, val["val.M_t.hstar"].success, flag, ev.reason, g.rule,
                             g.allow_fit_risk)
    promoted, why = verdict.promoted, verdict.reasons
    fit = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in ev.model_dump().items()}
    return GateRecord(promoted=promoted, reason=("PROMOTED: " if promoted else "NOT PROMOTED: ") + "; ".join(why),
                      candidate=adapter_name(ctx.t, "corr", best), best_seed=best,
                      val={k: v.success for k, v in val.items()}, diff=diff.model_dump(), fit=fit, fit_flag=flag)


def _promote(ctx: RoundContext, rec: GateRecord, adapter_dir: str, h_star: str) -> GateRecord:
    from training.merge import merge_adapter

    nxt = f"student-r{ctx.t + 1}"
    merged = ""
    if ctx.r.gate.merge:
        merged = str(merge_adapter(ctx.state.student_weights, adapter_dir, ctx.store.root / "merged" / nxt).resolve())
    registry = PromotionRegistry.under(ctx.store.root.parent.parent.parent)
    evidence = {"reason": rec.reason, "val": rec.val, "diff": rec.diff, "fit": rec.fit, "adapter": adapter_dir}
    for fam in ctx.families():
        path = Path(h_star) / f"{fam}.yaml" if h_star != "baseline" else None
        hid = Harness.load(path).id if path else "baseline"
        registry.promote(Promotion(family=fam, student=f"hosted_vllm/{nxt}", student_path=merged or None,
                                   harness_id=hid, harness_path=str(path or "baseline"), run_id=_run_id(ctx),
                                   round=ctx.t + 1, evidence=evidence))
    return rec.model_copy(update={"merged_dir": merged, "next_student": f"hosted_vllm/{nxt}"})


def _run_id(ctx: RoundContext) -> str:
    return ctx.store.root.parent.parent.name


def gate(ctx: RoundContext, h_star: str, trained: TrainRecord, tests: dict[str, EvalRecord]) -> GateRecord:
    corr = trained.arms.get("corr")
    if corr is None or not corr.adapters:
        rec = GateRecord(promoted=False, reason="NOT PROMOTED: no correction adapter ("
                         + (corr.reason if corr else "the corr arm is not configured") + ")")
    else:
        seeds = sorted(corr.adapters)
        g = ctx.r.gate
        val = evaluate_pairs(ctx, _val_pairs(ctx, h_star, seeds), "val", g.val_instances, g.val_seeds, tag="gate")
        best = max(seeds, key=lambda k: (val[f"val.corr.s{k}.hstar"].success, -k))
        rec = _decide(ctx, val, best, tests)
        if rec.promoted:
            rec = _promote(ctx, rec, corr.adapters[best], h_star)
    PromotionRegistry.under(ctx.store.root.parent.parent.parent).record_decision(GateDecision(
        run_id=_run_id(ctx), round=ctx.t, candidate=rec.candidate, promoted=rec.promoted, reason=rec.reason,
        evidence=rec.model_dump(exclude={"reason", "promoted", "candidate"})))
    return rec
