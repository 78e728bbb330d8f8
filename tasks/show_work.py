"""The families' show-your-work policies behind one literal table (the policies the micro student learned from).

    module = tasks.show_work.module("payroll_audit")      # None for a family without one
    if module is not None and module.applies(instance):
        action = module.next_action(env, history, module.ALL_KNOWN)

Each module `tasks/<family>/show_work.py` has `applies(instance)`, `ALL_KNOWN` (every knowledge item) and
`next_action(env, history, knows)`: a policy that writes only values derivable from what the trajectory shows.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# family -> module of its show-your-work policy. A literal table, not a mutable registry.
SHOW_WORK_TABLE: dict[str, str] = {
    "anomaly_detection": "tasks.anomaly_detection.show_work",
    "code_refactor": "tasks.code_refactor.show_work",
    "payroll_audit": "tasks.payroll_audit.show_work",
    "website_admin": "tasks.website_admin.show_work",
}


def module(family: str) -> ModuleType | None:
    """The family's show-your-work module, or None when the family has none."""
    name = SHOW_WORK_TABLE.get(family)
    return importlib.import_module(name) if name else None
