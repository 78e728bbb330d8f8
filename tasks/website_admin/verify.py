"""website_admin verifier: questions are judged on the final answer (the exact number, or the must-include
product names and no others), edits on the database (each gold change applied, nothing else touched).

It reads a `WebsiteAdminSnapshot` (the final mutable tables and the final answer), never the environment
or its server. The initial tables are rebuilt from the instance's shop seed.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from tasks.records import TaskInstance, Verdict
from tasks.shop.checks import Items, check_names, check_number, diff_checks, initial_tables
from tasks.shop.data import generate_shop

CHECK_NAMES = ("answer", "answer_names", "no_extra_products", "requested_changes", "no_collateral_changes")


class WebsiteAdminSnapshot(BaseModel):
    """What the verifier reads: every mutable table (rows as dicts, in key order) and the final answer."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tables: dict[str, list[dict[str, Any]]]
    answer: str


def verify(instance: TaskInstance, snap: WebsiteAdminSnapshot) -> Verdict:
    p = instance.payload
    shop = generate_shop(p["shop_seed"])
    checks: Items = {}
    if "answer" in p:
        want = p["answer"]
        if "number" in want:
            ok, why = check_number(snap.answer, want["number"], instance.instruction)
            checks["answer"] = [(ok, why or "")]
        else:
            checks.update(check_names(snap.answer, want["names"], [x["name"] for x in shop.products]))
        checks.update(diff_checks(initial_tables(shop), snap.tables, []))
    else:
        checks.update(diff_checks(initial_tables(shop), snap.tables, p["changes"]))
    return Verdict.from_items(checks)
