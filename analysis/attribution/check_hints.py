"""Which failure category a failed verifier check usually points to: a hint per family, not the answer.

`tasks/` knows nothing of the ontology; this table is the bridge. Each family lists its checks as patterns
where only `*` is special (any text; everything else literal, case-sensitive) **in causal order**: a check earlier in the list fails on its own,
a later one often fails only because an earlier one did (no audit file -> every column check fails). The
heuristic attributor takes the *first failed check in this order* as the primary one.

Hint `output` means "a required output is missing"; the attributor resolves it from the trajectory
(written under a name the task never mentions -> instruction_following; never written -> planning).
A `skip_cue` turns a hint into `planning` when the check's feedback says the work was not done at all
(budget_approval's "REQ-1 (no reply)"); a `format_cue` turns it into `instruction_following` when the
feedback says the output's required shape is missing (payroll_audit's "key missing or not a list").

`tests/test_analysis_check_hints.py` fails when a family has a check this table does not cover.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Hint = Literal["tool_use", "instruction_following", "implicit_knowledge", "long_context", "planning",
               "environment_or_harness", "output"]


class CheckHint(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    pattern: str
    hint: Hint
    why: str = ""
    skip_cue: str = Field(default="", description="Regex: when the check's feedback matches it, the work was "
                                                  "skipped rather than done wrong, and the hint is `planning`.")
    format_cue: str = Field(default="", description="Regex: when the check's feedback matches it, the output lacks "
                                                    "the shape the task prescribes (a key, a field), and the hint "
                                                    "is `instruction_following`.")

    def resolve(self, feedback: str) -> Hint:
        """The hint for one failure of this check, given the check's own feedback line."""
        if self.skip_cue and re.search(self.skip_cue, feedback):
            return "planning"
        if self.format_cue and re.search(self.format_cue, feedback):
            return "instruction_following"
        return self.hint


def _h(pattern: str, hint: Hint, why: str = "", skip_cue: str = "", format_cue: str = "") -> CheckHint:
    return CheckHint(pattern=pattern, hint=hint, why=why, skip_cue=skip_cue, format_cue=format_cue)


_NO_KEY = r"key missing"  # payroll_audit's exceptions lists: the key the task names is absent


COMMON: tuple[CheckHint, ...] = (
    _h("verify_crashed", "environment_or_harness", "the verifier itself raised"),
    _h("policy_crashed", "environment_or_harness", "a scripted policy raised"),
)

FAMILY_HINTS: dict[str, tuple[CheckHint, ...]] = {
    "payroll_audit": (
        _h("audit_file_readable", "output"), _h("exceptions_file_readable", "output"),
        _h("audit_columns", "instruction_following", "the task names the exact columns"),
        _h("department_rows", "planning", "a department was skipped"),
        _h("headcount", "implicit_knowledge", "who counts (unknown employees are excluded)"),
        _h("days_worked", "implicit_knowledge", "a missing punch still counts as a day worked"),
        _h("total_hours", "implicit_knowledge"), _h("overtime_hours", "implicit_knowledge", "overtime threshold"),
        _h("late_arrivals", "implicit_knowledge", "grace period"), _h("gross_pay", "implicit_knowledge", "rates, rounding"),
        _h("missing_punch_list", "implicit_knowledge", format_cue=_NO_KEY),
        _h("unknown_employee_list", "implicit_knowledge", format_cue=_NO_KEY),
        _h("overtime_over_limit_list", "implicit_knowledge", format_cue=_NO_KEY),
    ),
    "budget_approval": (
        _h("required_documents_read", "planning", "a required document was never opened"),
        _h("required_people_contacted", "planning", "a required quote or contact was skipped"),
        _h("reply_decisions", "implicit_knowledge", "approval limits and budgets", skip_cue=r"\(no reply\)"),
        _h("reply_totals", "implicit_knowledge", "which price applies", skip_cue=r"\(no reply\)"),
        _h("escalations", "planning", "an escalation message was skipped"),
        _h("summary_file", "instruction_following", "summary columns and format"),
    ),
    "stock_alert": (
        _h("sheet_exists", "output"),
        _h("sheet_columns", "instruction_following", "the task names the exact columns"),
        _h("sheet_rows_only_low_stock", "implicit_knowledge", "the low-stock bound (at or below)"),
        _h("sheet_rows_complete", "implicit_knowledge", "the bound; a skipped page shows as a listing gap first"),
        _h("one_email_per_low_product", "planning", "an email was skipped or sent twice"),
        _h("email_fields", "instruction_following", "the template's recipient, subject and fields"),
        _h("no_extra_emails", "implicit_knowledge", "emails about products that are not low"),
    ),
    "anomaly_detection": (
        _h("report_uploaded", "output"),
        _h("required_columns", "instruction_following", "the task names the report columns"),
        _h("precision", "implicit_knowledge", "window bounds, operating ranges, units"),
        _h("recall", "implicit_knowledge", "window bounds, operating ranges, units"),
    ),
    "code_refactor": (
        _h("sources_parse", "tool_use", "an edit left a syntax error"),
        _h("new_name_defined", "instruction_following"), _h("signature_updated", "instruction_following"),
        _h("function_extracted", "instruction_following"), _h("module_moved", "instruction_following"),
        _h("old_name_removed", "planning", "a reference was not updated"),
        _h("call_sites_pass_currency", "planning", "a call site was skipped"),
        _h("caller_uses_extracted", "planning"), _h("no_inline_tax", "planning"),
        _h("imports_updated", "planning", "an import was not updated"),
        _h("visible_tests_pass", "planning", "tests were not updated or not run"),
        _h("hidden_tests_pass", "implicit_knowledge", "behaviour changed"),
    ),
    "website_admin": (
        _h("answer", "implicit_knowledge", "how the figure is counted"),
        _h("answer_names", "implicit_knowledge", "which orders or products count"),
        _h("no_extra_products", "instruction_following", "name exactly the products asked for"),
        _h("requested_changes", "planning", "an edit was not made"),
        _h("no_collateral_changes", "tool_use", "a wrong element was clicked or filled"),
    ),
    "browser_automation": (
        _h("tests_written", "output"),
        _h("new_row_created", "output"),
        _h("new_row_fields", "instruction_following", "a field differs from the value the task gives"),
        _h("requested_changes", "planning", "a step of the workflow was not done"),
        _h("no_collateral_changes", "tool_use", "a wrong element was clicked or filled"),
        _h("tests_pass", "implicit_knowledge", "what the page does"),
    ),
}


def matches(pattern: str, check: str) -> bool:
    """`*` matches any text; every other character stands for itself (brackets included)."""
    return re.fullmatch(".*".join(re.escape(part) for part in pattern.split("*")), check, re.DOTALL) is not None


def hints_for(family: str) -> tuple[CheckHint, ...]:
    return FAMILY_HINTS.get(family, ()) + COMMON


def hint_for(family: str, check: str) -> CheckHint | None:
    """The first entry of the family's table (then the common one) whose pattern matches `check`."""
    return next((h for h in hints_for(family) if matches(h.pattern, check)), None)


def primary_failed_check(family: str, failed: Sequence[str]) -> tuple[str, CheckHint] | None:
    """The failed check that comes first in the family's causal order, with its hint (None: none is known)."""
    best: tuple[int, str, CheckHint] | None = None
    table = hints_for(family)
    for check in failed:
        for pos, h in enumerate(table):
            if matches(h.pattern, check):
                if best is None or pos < best[0]:
                    best = (pos, check, h)
                break
    return None if best is None else (best[1], best[2])


def uncovered(family: str, checks: Iterable[str]) -> list[str]:
    """Check names of `family` that no pattern of the table covers."""
    return sorted({c for c in checks if hint_for(family, c) is None})
