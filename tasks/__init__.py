"""The task suite: seven verifiable enterprise task families behind one registry.

    import tasks
    fam = tasks.get("stock_alert")
    for inst in tasks.instances("stock_alert", "val"): ...

Families are imported lazily so `import tasks` stays light (no browser, no torch).
"""

from __future__ import annotations

import functools
import importlib
import importlib.util

from tasks.base import Environment, Family
from tasks.records import Split, TaskInstance

# name -> "module:attribute" of the Family class. A literal table, not a mutable registry.
FAMILY_TABLE: dict[str, str] = {
    "payroll_audit": "tasks.payroll_audit:PayrollAudit",
    "budget_approval": "tasks.budget_approval:BudgetApproval",
    "stock_alert": "tasks.stock_alert:StockAlert",
    "anomaly_detection": "tasks.anomaly_detection:AnomalyDetection",
    "code_refactor": "tasks.code_refactor:CodeRefactor",
    "website_admin": "tasks.website_admin:WebsiteAdmin",
    "browser_automation": "tasks.browser_automation:BrowserAutomation",
}


def _available(name: str) -> bool:
    module = FAMILY_TABLE[name].split(":")[0]
    return importlib.util.find_spec(module) is not None


def families() -> list[str]:
    """Names of the families whose module is present, in table order."""
    return [n for n in FAMILY_TABLE if _available(n)]


@functools.cache
def get(name: str) -> Family:
    if name not in FAMILY_TABLE:
        raise KeyError(f"unknown task family '{name}'; known: {', '.join(FAMILY_TABLE)}")
    module, attr = FAMILY_TABLE[name].split(":")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except ModuleNotFoundError as e:
        if e.name == module:
            raise KeyError(f"task family '{name}' is not installed in this checkout ({module} missing)") from None
        raise
    return cls()


def instances(family: str, split: Split | None = None, n: int | None = None) -> list[TaskInstance]:
    return get(family).instances(split, n)


def instance(instance_id: str) -> TaskInstance:
    family, _, index = instance_id.partition("/")
    return get(family).generate(int(index))


def make_env(inst: TaskInstance) -> Environment:
    return get(inst.family).make_env(inst)


__all__ = ["FAMILY_TABLE", "Environment", "Family", "families", "get", "instance", "instances", "make_env"]
