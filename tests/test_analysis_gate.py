"""The promotion rule: a candidate equal to M_t is not promoted under the default `gain` rule (it was, under the
old non-inferiority rule); a significant loss or a fit flag refuses it under both rules."""

from __future__ import annotations

from analysis.gate import promotion_rule
from analysis.stats import PairedDiff


def _diff(d: float, lo: float, hi: float) -> PairedDiff:
    return PairedDiff(a="cand", b="M_t", family="all", diff=d, ci_low=lo, ci_high=hi, n_units=15, n_instances=15,
                      n_boot=1000, confidence=0.95)


def test_an_equal_candidate_is_not_promoted_under_gain_but_is_under_non_inferior():
    same = _diff(0.0, -0.1, 0.1)
    gain = promotion_rule(same, 0.2, 0.2, fit_flag=False, fit_reason="KL 0.008")
    assert not gain.promoted and gain.reasons[0] == "no gain" and "no gain (rule 'gain'" in gain.reasons[1]
    assert promotion_rule(same, 0.2, 0.2, False, "KL 0.008", rule="non_inferior").promoted


def test_a_gain_is_promoted_unless_the_fit_check_flags_it():
    up = _diff(0.1, -0.05, 0.25)
    assert promotion_rule(up, 0.3, 0.2, False, "ok").promoted
    flagged = promotion_rule(up, 0.3, 0.2, True, "KL 0.9 > 0.05")
    assert not flagged.promoted and flagged.reasons[-1].endswith("-> at risk")
    assert promotion_rule(up, 0.3, 0.2, True, "KL 0.9", allow_fit_risk=True).promoted


def test_a_significant_loss_is_refused_under_both_rules():
    down = _diff(-0.3, -0.5, -0.1)
    for rule in ("gain", "non_inferior"):
        v = promotion_rule(down, 0.0, 0.3, False, "ok", rule=rule)
        assert not v.promoted and "significantly below M_t" in v.reasons[0]
