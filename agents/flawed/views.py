"""Views of an environment for the oracle: a shallow copy whose payload (or a flag) a belief changed.

The copy shares the live state (sheets, files, browser, database) with the environment, so the oracle
still reads what really happened; only the attributes a belief replaces differ. The oracles only read.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from agents.flawed.menu import Belief


def view_of(env: Any, beliefs: Sequence[tuple[Belief, str]]) -> Any:
    if not beliefs:
        return env
    view = copy.copy(env)
    for belief, unit in beliefs:
        belief.apply(view, unit)
    return view


def set_payload(view: Any, **changes: Any) -> None:
    """For environments that hold a parsed `payload` (stock_alert, budget_approval, anomaly_detection)."""
    view.payload = view.payload.model_copy(update=changes)


def set_instance_payload(view: Any, payload: dict[str, Any]) -> None:
    """For environments that read `instance.payload` (payroll_audit, code_refactor, the browser families)."""
    view.instance = view.instance.model_copy(update={"payload": payload})
