"""The promotion rule: does a trained candidate replace M_t? Pure decisions over measured evidence.

    evidence = judge_candidates(frame, "M_t", {0: "corr.s0", 1: "corr.s1"}, "average", n_boot=2000)
    verdict = promotion_rule(evidence.diff, evidence.candidate, evidence.incumbent, fit_flag=False, fit_reason="..")
    verdict.promoted, verdict.reasons

What the gate judges (`judge_candidates`), on validation rollouts the harness search never saw (the caller's job:
flows/round/gate.py takes the val instances after the search's):
- `average` (the default): every training seed of the correction arm is judged together, the paired difference
  (mean over the seeds) - M_t with `analysis.stats.two_level_bootstrap` (instances and training seeds resampled).
  The seed promoted when it passes is the one with the best validation mean; it is chosen after the decision,
  which it does not enter.
- `split`: the validation instances are split in two (per family, alternately by index); the seed with the best
  mean on the first half is the candidate, judged on the second half alone. With one training seed there is
  nothing to choose: it is judged on every unit.

Rules (`round.gate.rule`):
- `gain` (the default): promote only when the paired difference's CI low end is above 0 (evidence of a gain)
  and the fit check passes (or is overridden). A candidate equal to M_t is "no gain shown": promoting no-ops
  accumulates drift round after round.
- `non_inferior`: promote unless significantly below M_t (the CI's high end under 0), and the fit check passes
  or is overridden.
The error rates of `gain` (a no-op's promotion rate, the power for a +10-point gain) are measured by
`analysis.gate_power` (docs/correction.md, "The promotion gate's error rates").
"""

from __future__ import annotations

from typing import Literal

import polars as pl
from pydantic import BaseModel, ConfigDict, Field

from analysis.stats import PairedDiff, two_level_bootstrap

Rule = Literal["gain", "non_inferior"]
SeedChoice = Literal["average", "split"]
CANDIDATE = "candidate"


class PromotionVerdict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    promoted: bool
    reasons: list[str] = Field(description="Why, in order: the deciding reason first.")


def promotion_rule(diff: PairedDiff, candidate: float, incumbent: float, fit_flag: bool, fit_reason: str,
                   rule: Rule = "gain", allow_fit_risk: bool = False) -> PromotionVerdict:
    """Decide from the validation means, the paired difference candidate - M_t and the fit monitor's flag."""
    below = diff.ci_high < 0
    no_gain = rule == "gain" and not diff.ci_low > 0
    seeds = f", {diff.seeds_a} training seeds" if diff.seeds_a > 1 else ""
    val = (f"validation: candidate {candidate:.3f} vs M_t {incumbent:.3f}, paired diff {diff.diff:+.3f} "
           f"[{diff.ci_low:+.3f}, {diff.ci_high:+.3f}] ({diff.n_units} units, {diff.n_instances} instances{seeds}): "
           + ("significantly below M_t" if below else "not significantly below M_t")
           + (", no gain shown (rule 'gain': the paired difference's CI low end must be above 0)" if no_gain else ""))
    fit = (f"fit: {fit_reason}" + (" -> at risk" if fit_flag else " -> ok")
           + (" (overridden: allow_fit_risk)" if fit_flag and allow_fit_risk else ""))
    promoted = not below and not no_gain and (not fit_flag or allow_fit_risk)
    lead = ["no gain shown"] if no_gain and not below else []
    return PromotionVerdict(promoted=promoted, reasons=[*lead, val, fit])


class GateEvidence(BaseModel):
    """What `judge_candidates` measured: the chosen seed, where it was chosen and where it was judged."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    seed_choice: SeedChoice
    chosen_seed: int = Field(description="The training seed promoted if the verdict passes.")
    seed_means: dict[int, float] = Field(description="Each seed's validation mean on the units it was chosen on.")
    select_instances: list[str] = Field(description="Instances the seed was chosen on ('split'); [] otherwise.")
    judge_instances: list[str] = Field(description="Instances the decision was made on.")
    candidate: float = Field(description="The judged side's mean on the judge units (all seeds' mean for 'average').")
    incumbent: float = Field(description="M_t's mean on the judge units.")
    diff: PairedDiff


def split_instances(instance_ids: list[str]) -> tuple[list[str], list[str]]:
    """(selection half, decision half): per family, the instances by index, alternately (the first to selection)."""
    by_family: dict[str, list[str]] = {}
    for iid in sorted(set(instance_ids), key=lambda i: (i.partition("/")[0], int(i.partition("/")[2] or 0))):
        by_family.setdefault(iid.partition("/")[0], []).append(iid)
    select = [i for ids in by_family.values() for i in ids[0::2]]
    judge = [i for ids in by_family.values() for i in ids[1::2]]
    return select, judge


def _means(frame: pl.DataFrame, group: str, names: dict[int, str], instances: list[str]) -> dict[int, float]:
    sub = frame.filter(pl.col("instance_id").is_in(instances))
    return {k: float(sub.filter(pl.col(group) == name)["passed"].cast(pl.Float64).mean() or 0.0)
            for k, name in names.items()}


def _best(means: dict[int, float]) -> int:
    return max(sorted(means), key=lambda k: (means[k], -k))


def judge_candidates(frame: pl.DataFrame, incumbent: str, seeds: dict[int, str], choice: SeedChoice = "average", *,
                     group: str = "pair", n_boot: int = 2000, confidence: float = 0.95,
                     seed: int = 0) -> GateEvidence:
    """The gate's evidence from validation rollouts: `frame` holds M_t's (`group` == `incumbent`) and each training
    seed's (`seeds`: training seed -> group value), with `instance_id`, `seed` (evaluation seed), `passed`."""
    if not seeds:
        raise ValueError("judge_candidates: no training seed to judge")
    instances = sorted(set(frame.filter(pl.col(group) == incumbent)["instance_id"].to_list()))
    select, judge = split_instances(instances) if choice == "split" and len(seeds) > 1 else ([], instances)
    if choice == "split" and len(seeds) > 1 and not (select and judge):
        raise ValueError(f"seed choice 'split' needs at least 2 validation instances; got {len(instances)}")
    means = _means(frame, group, seeds, select or instances)
    chosen = _best(means)
    judged = [chosen] if select else sorted(seeds)
    rows = frame.filter(pl.col("instance_id").is_in(judge))
    labelled = pl.concat([
        rows.filter(pl.col(group) == incumbent).select("family", "instance_id", "seed", "passed")
        .with_columns(pl.lit(incumbent).alias(group), pl.lit(None, dtype=pl.Int64).alias("train_seed")),
        *(rows.filter(pl.col(group) == seeds[k]).select("family", "instance_id", "seed", "passed")
          .with_columns(pl.lit(CANDIDATE).alias(group), pl.lit(k, dtype=pl.Int64).alias("train_seed"))
          for k in judged)])
    diff = two_level_bootstrap(labelled, CANDIDATE, incumbent, group=group, seed_col="train_seed", n_boot=n_boot,
                               confidence=confidence, seed=seed)
    cand_rows = labelled.filter(pl.col(group) == CANDIDATE)
    inc_rows = labelled.filter(pl.col(group) == incumbent)
    return GateEvidence(seed_choice=choice, chosen_seed=chosen, seed_means=means, select_instances=select,
                        judge_instances=judge, candidate=float(cand_rows["passed"].cast(pl.Float64).mean() or 0.0),
                        incumbent=float(inc_rows["passed"].cast(pl.Float64).mean() or 0.0), diff=diff)
