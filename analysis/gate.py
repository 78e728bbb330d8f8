"""The promotion rule: does a trained candidate replace M_t? A pure decision over measured evidence.

    verdict = promotion_rule(diff, candidate=0.45, incumbent=0.40, fit_flag=False, rule="gain")
    verdict.promoted, verdict.reasons

Rules (`round.gate.rule`):
- `gain` (the default): promote only when the candidate's validation mean is above M_t's, the paired bootstrap
  does not find it significantly below (the CI's upper end is not under 0), and the fit check passes (or is
  overridden). A candidate equal to M_t is "no gain": promoting no-ops accumulates drift round after round.
- `non_inferior`: promote unless significantly below M_t (and the fit check passes or is overridden).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from analysis.stats import PairedDiff

Rule = Literal["gain", "non_inferior"]


class PromotionVerdict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    promoted: bool
    reasons: list[str] = Field(description="Why, in order: the deciding reason first.")


def promotion_rule(diff: PairedDiff, candidate: float, incumbent: float, fit_flag: bool, fit_reason: str,
                   rule: Rule = "gain", allow_fit_risk: bool = False) -> PromotionVerdict:
    """Decide from the validation means, the paired difference candidate - M_t and the fit monitor's flag."""
    below = diff.ci_high < 0
    no_gain = rule == "gain" and not candidate > incumbent
    val = (f"validation: candidate {candidate:.3f} vs M_t {incumbent:.3f}, paired diff {diff.diff:+.3f} "
           f"[{diff.ci_low:+.3f}, {diff.ci_high:+.3f}] ({diff.n_units} units): "
           + ("significantly below M_t" if below else "not significantly below M_t")
           + (", no gain (rule 'gain': the candidate's mean must be above M_t's)" if no_gain else ""))
    fit = (f"fit: {fit_reason}" + (" -> at risk" if fit_flag else " -> ok")
           + (" (overridden: allow_fit_risk)" if fit_flag and allow_fit_risk else ""))
    promoted = not below and not no_gain and (not fit_flag or allow_fit_risk)
    lead = ["no gain"] if no_gain and not below else []
    return PromotionVerdict(promoted=promoted, reasons=[*lead, val, fit])
