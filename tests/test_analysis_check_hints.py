"""Every verifier check of every family is covered by the check -> category hint table.

Check names are discovered from real verdicts: the do-nothing policy's verdict lists every check of an
instance as passed or failed, so instances of every kind are run (code_refactor's four refactoring kinds at
both levels, website_admin's nine question/edit kinds, browser_automation's four workflows); the test-writing
variant also runs a policy that writes one trivial test, whose verdict names the per-test checks.
When a family declares its checks statically (`Family.check_names`, planned), that tuple is used instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

import tasks
from analysis.attribution.check_hints import FAMILY_HINTS, hint_for, primary_failed_check, uncovered
from tasks.base import Environment
from tasks.browser_automation import KINDS as BROWSER_KINDS
from tasks.code_refactor.package import KINDS as CODE_KINDS
from tasks.policies import run_policy
from tasks.records import FinalAnswer, Step, ToolCall
from tasks.website_admin import KINDS as WEB_KINDS

# indices whose instances cover every kind (kind = index % 9, index % 4, (index // 2) % 4; odd = hard)
KIND_INDICES: dict[str, list[int]] = {
    "payroll_audit": [0, 1], "budget_approval": [0, 1], "stock_alert": [0, 1], "anomaly_detection": [0, 1],
    "code_refactor": list(range(8)), "website_admin": list(range(9)), "browser_automation": list(range(4)),
}


def one_trivial_test(env: Environment, history: Sequence[Step]) -> ToolCall | FinalAnswer:
    if not history:
        return ToolCall(name="write_file", arguments={"path": "tests/test_x.py", "content": "def test_x(page):\n    assert True\n"})
    return FinalAnswer(text="done")


async def discovered_checks(family: str) -> set[str]:
    names: set[str] = set()
    for i in KIND_INDICES[family]:
        inst = tasks.get(family).generate(i)
        runs = [await run_policy(inst, "do_nothing")]
        if inst.payload.get("kind") == "write_tests":
            runs.append(await run_policy(inst, one_trivial_test))
        for r in runs:
            assert not r.error, r.error
            names |= set(r.verdict.passed_checks) | set(r.verdict.failed_checks)
    return names


@pytest.mark.parametrize("family", tasks.families())
def test_table_covers_every_check(family: str) -> None:
    fam = tasks.get(family)
    names = set(fam.check_names) if hasattr(fam, "check_names") else asyncio.run(discovered_checks(family))
    assert names, f"no check names found for {family}"
    assert family in FAMILY_HINTS, f"{family} has no entry in analysis/attribution/check_hints.py"
    assert uncovered(family, names) == [], f"add these {family} checks to analysis/attribution/check_hints.py"


def test_kinds_are_all_covered() -> None:
    refactor = {tasks.get("code_refactor").generate(i).payload["spec"]["kind"] for i in KIND_INDICES["code_refactor"]}
    web = {tasks.get("website_admin").generate(i).payload["kind"] for i in KIND_INDICES["website_admin"]}
    browser = {tasks.get("browser_automation").generate(i).payload["kind"] for i in KIND_INDICES["browser_automation"]}
    assert refactor == set(CODE_KINDS) and web == set(WEB_KINDS) and browser == set(BROWSER_KINDS)


def test_hint_lookup_and_causal_order() -> None:
    assert hint_for("website_admin", "products[OUT-236].price_cents = 4799").hint == "planning"
    assert hint_for("browser_automation", "discount_rules[WEEKEND95] exists").hint == "output"
    assert hint_for("payroll_audit", "verify_crashed").hint == "environment_or_harness"
    assert hint_for("payroll_audit", "no_such_check") is None
    check, hint = primary_failed_check("payroll_audit", ["gross_pay", "audit_columns", "headcount"])
    assert (check, hint.hint) == ("audit_columns", "instruction_following")
    check, hint = primary_failed_check("budget_approval", ["escalations", "reply_decisions"])
    assert hint.resolve("REQ-1 (no reply)") == "planning" and hint.resolve("REQ-1") == "implicit_knowledge"
