"""Every verifier check of every family is covered by the check -> category hint table.

Families declare their checks statically (`Family.check_names`); tests/test_tasks_check.py asserts that the
verdicts of the oracle and the do-nothing policy on all 700 instances use only declared names, so a family
that gains a check must declare it, and this test then fails until the table covers it.
"""

from __future__ import annotations

import pytest

import tasks
from analysis.attribution.check_hints import FAMILY_HINTS, hint_for, primary_failed_check, uncovered


@pytest.mark.parametrize("family", tasks.families())
def test_table_covers_every_check(family: str) -> None:
    names = set(tasks.get(family).check_names)
    assert names, f"no check names declared for {family}"
    assert family in FAMILY_HINTS, f"{family} has no entry in analysis/attribution/check_hints.py"
    assert uncovered(family, names) == [], f"add these {family} checks to analysis/attribution/check_hints.py"


def test_uncovered_names_a_new_check() -> None:
    assert uncovered("stock_alert", ["sheet_exists", "a_check_added_tomorrow"]) == ["a_check_added_tomorrow"]


def test_hint_lookup_and_causal_order() -> None:
    assert hint_for("website_admin", "requested_changes").hint == "planning"
    assert hint_for("browser_automation", "new_row_created").hint == "output"
    assert hint_for("payroll_audit", "verify_crashed").hint == "environment_or_harness"
    assert hint_for("payroll_audit", "no_such_check") is None
    check, hint = primary_failed_check("payroll_audit", ["gross_pay", "audit_columns", "headcount"])
    assert (check, hint.hint) == ("audit_columns", "instruction_following")
    check, hint = primary_failed_check("budget_approval", ["escalations", "reply_decisions"])
    assert hint.resolve("REQ-1 (no reply)") == "planning" and hint.resolve("REQ-1") == "implicit_knowledge"
