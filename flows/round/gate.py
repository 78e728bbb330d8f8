"""The promotion gate of round t: does the correction arm's adapter become M_{t+1}?

1. M_t and every correction seed under h*_t on val instances the harness search never saw: the
   `round.gate.val_instances` after the search's first `round.search.val_instances` (so M_t's score on h* is
   not the one the search picked h* with), `val_seeds` each.
2. The evidence (analysis/gate.py `judge_candidates`): `seed_choice: average` judges the mean over the training
   seeds (instances and training seeds resampled) and promotes the seed with the best validation mean;
   `split` chooses the seed on half the instances and judges it on the other half.
3. The rule (analysis/gate.py `promotion_rule`): under `gain` (the default) the paired difference's CI low end
   must be above 0 ("not promoted: no gain shown" otherwise); `non_inferior` refuses only a significant loss.
4. The fit monitor (analysis/fit.py `fit_alarm`) on the validation rollouts (never test ones): the promoted
   seed vs M_t under h*_t; a flag refuses it unless `round.gate.allow_fit_risk`.
5. Promoted: merged into M_t's weights (training/merge.py) as `<round>/merged/student-r{t+1}`, a promotion row
   per family in the registry (`<runs_dir>/registry.sqlite`). Every decision, kept or not, is a registry row.

The promotion is one unit, all or nothing: the merged weights are written to a staging directory, hashed
(`registry.directory_sha256`, kept in `weights.sha256` beside them) and renamed into place; then ONE registry
transaction writes every family's promotion row (with that sha256) and the decision. A gate killed anywhere
(the kill points of flows/faults.py) leaves no row without complete weights; its resume finds finished
weights by their digest (a mismatch is merged again), and a decision already committed (same token) is not
written twice: the candidate ends wholly promoted or wholly not.
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from analysis.fit import FitConfig, fit_alarm
from analysis.gate import judge_candidates, promotion_rule
from flows import faults
from flows.ops.registry import SHA_FILE, GateDecision, Promotion, PromotionRegistry, directory_sha256
from flows.round.config import adapter_name
from flows.round.context import PairPlan, RoundContext
from flows.round.eval import EvalRecord, evaluate_pairs, frame_of, trajectories_of
from flows.round.train import TrainRecord
from harness.program import Harness


class GateRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    promoted: bool
    reason: str
    candidate: str = ""
    best_seed: int | None = None
    val: dict[str, float] = Field(default_factory=dict, description="Validation success per pair.")
    diff: dict[str, Any] = Field(default_factory=dict, description="PairedDiff candidate - M_t (validation).")
    fit: dict[str, Any] = Field(default_factory=dict, description="FitEvidence of the promoted seed (validation, "
                                "under h*; before the gate read validation rollouts: test).")
    seed_choice: str = Field(default="", description="How the seed was chosen and judged (analysis/gate.py).")
    seed_means: dict[int, float] = Field(default_factory=dict, description="Each seed's validation mean on the "
                                         "units it was chosen on.")
    instances: dict[str, int] = Field(default_factory=dict, description="Val instances: the search's and the gate's "
                                      "per family; then, over all families, those the seed was chosen on ('split') "
                                      "and those the decision was judged on.")
    fit_flag: bool | None = None
    merged_dir: str = ""
    merged_sha256: str = Field(default="", description="directory_sha256 of the merged weights (the registry's too).")
    next_student: str = ""


def _val_pairs(ctx: RoundContext, h_star: str, seeds: list[int]) -> list[PairPlan]:
    pairs = [PairPlan(name="val.M_t.hstar", role=ctx.student(), harness=h_star, label="M_t h* (val)")]
    pairs += [PairPlan(name=f"val.corr.s{k}.hstar", role=ctx.student(adapter_name(ctx.t, "corr", k)), harness=h_star,
                       label=f"correction s{k} h* (val)") for k in seeds]
    return pairs


def _decide(ctx: RoundContext, val: dict[str, EvalRecord], seeds: list[int]) -> GateRecord:
    g = ctx.r.gate
    frame = frame_of(ctx.store, list(val.values()))
    names = {k: f"val.corr.s{k}.hstar" for k in seeds}
    ev = judge_candidates(frame, "val.M_t.hstar", names, g.seed_choice, n_boot=g.bootstrap_samples,
                          confidence=g.confidence)
    best = ev.chosen_seed
    fit_cfg = ctx.config.attribution.fit if ctx.config.attribution else FitConfig()
    flag, fit_ev = fit_alarm(trajectories_of(ctx.store, [val[names[best]]]),
                             trajectories_of(ctx.store, [val["val.M_t.hstar"]]), (), fit_cfg)
    verdict = promotion_rule(ev.diff, ev.candidate, ev.incumbent, flag, fit_ev.reason, g.rule, g.allow_fit_risk)
    promoted, why = verdict.promoted, verdict.reasons
    fit = {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in fit_ev.model_dump().items()}
    skip, n = ctx.r.gate_instances()
    units = {"search's per family": skip, "gate's per family": n, "seed chosen on": len(ev.select_instances),
             "judged on": len(ev.judge_instances)}
    return GateRecord(promoted=promoted, reason=("PROMOTED: " if promoted else "NOT PROMOTED: ") + "; ".join(why),
                      candidate=adapter_name(ctx.t, "corr", best), best_seed=best,
                      val={k: v.success for k, v in val.items()}, diff=ev.diff.model_dump(), fit=fit, fit_flag=flag,
                      seed_choice=g.seed_choice, seed_means=ev.seed_means, instances=units)


def _published(final: Path, base: str, adapter: str) -> str:
    """The digest of a finished merge at `final` of this base and adapter ('' when there is none or it does
    not match its recorded digest)."""
    from training.merge import merged

    sha_file = final / SHA_FILE
    if not (sha_file.exists() and merged(final, base, adapter)):
        return ""
    sha = sha_file.read_text().strip()
    return sha if directory_sha256(final) == sha else ""


def _publish_weights(ctx: RoundContext, adapter_dir: str, name: str) -> tuple[str, str]:
    """Merge into a staging directory, hash, then rename into `<round>/merged/<name>`: (path, sha256)."""
    from training.merge import merge_adapter

    final = ctx.store.root / "merged" / name
    sha = _published(final, ctx.state.student_weights, adapter_dir)
    if sha:
        return str(final.resolve()), sha
    staging = final.with_name(f".{name}.staging")
    for leftover in (staging, final, final.with_name(final.name + ".tmp")):
        shutil.rmtree(leftover, ignore_errors=True)
    merge_adapter(ctx.state.student_weights, adapter_dir, staging)
    faults.maybe_kill("gate_merge", ctx.store.root)
    sha = directory_sha256(staging)
    with (staging / SHA_FILE).open("w") as f:
        f.write(sha + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(staging, final)
    dir_fd = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself on disk before any registry row names it
    finally:
        os.close(dir_fd)
    return str(final.resolve()), sha


def _promotions(ctx: RoundContext, rec: GateRecord, adapter_dir: str, h_star: str) -> list[Promotion]:
    evidence = {"reason": rec.reason, "val": rec.val, "diff": rec.diff, "fit": rec.fit, "adapter": adapter_dir}
    rows = []
    for fam in ctx.families():
        path = Path(h_star) / f"{fam}.yaml" if h_star != "baseline" else None
        hid = Harness.load(path).id if path else "baseline"
        rows.append(Promotion(family=fam, student=rec.next_student, student_path=rec.merged_dir or None,
                              student_sha256=rec.merged_sha256 or None, harness_id=hid,
                              harness_path=str(path or "baseline"), run_id=_run_id(ctx), round=ctx.t + 1,
                              evidence=evidence))
    return rows


def _run_id(ctx: RoundContext) -> str:
    return ctx.store.root.parent.parent.name


def _commit(ctx: RoundContext, rec: GateRecord, promotions: list[Promotion]) -> None:
    """The decision and every promotion row: one registry transaction, written once per outcome."""
    from flows.store import content_key

    decision = GateDecision(run_id=_run_id(ctx), round=ctx.t, candidate=rec.candidate, promoted=rec.promoted,
                            reason=rec.reason, evidence=rec.model_dump(exclude={"reason", "promoted", "candidate"}))
    token = content_key("gate", _run_id(ctx), ctx.t, rec.candidate, rec.promoted, rec.merged_sha256)
    PromotionRegistry.under(ctx.store.root.parent.parent.parent).commit_gate(
        promotions, decision, token, before_commit=lambda: faults.maybe_kill("gate_registry", ctx.store.root))


def gate(ctx: RoundContext, h_star: str, trained: TrainRecord) -> GateRecord:
    corr = trained.arms.get("corr")
    promotions: list[Promotion] = []
    if corr is None or not corr.adapters:
        rec = GateRecord(promoted=False, reason="NOT PROMOTED: no correction adapter ("
                         + (corr.reason if corr else "the corr arm is not configured") + ")")
    else:
        seeds = sorted(corr.adapters)
        skip, n = ctx.r.gate_instances()
        val = evaluate_pairs(ctx, _val_pairs(ctx, h_star, seeds), "val", n, ctx.r.gate.val_seeds, tag="gate", skip=skip)
        rec = _decide(ctx, val, seeds)
        best = rec.best_seed or 0
        if rec.promoted:
            nxt = f"student-r{ctx.t + 1}"
            merged, sha = _publish_weights(ctx, corr.adapters[best], nxt) if ctx.r.gate.merge else ("", "")
            rec = rec.model_copy(update={"merged_dir": merged, "merged_sha256": sha,
                                         "next_student": f"hosted_vllm/{nxt}"})
            faults.maybe_kill("gate_weights", ctx.store.root)
            promotions = _promotions(ctx, rec, corr.adapters[best], h_star)
    _commit(ctx, rec, promotions)
    return rec
