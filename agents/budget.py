"""A run's API budget inside a stage: the episodes (and role calls) of a stage add their cost as they finish,
and the next batch checks the cap before any model is called.

    cap = SpendCap(limit_usd=20.0, spent_usd=spent_before_the_stage, hint="coevo run --resume RUN_ID ...")
    cap.check()            # raises BudgetSpent once spent >= limit
    cap.add(traj.cost_usd)

Work in flight when the cap is reached finishes and is kept (a batch is never cut midway); what a stage
finished before the raise stays in its store, so a resume with a larger budget repeats none of it.
"""

from __future__ import annotations

import threading


class BudgetSpent(RuntimeError):
    """The run's API budget is spent; the message says how to continue."""


class SpendCap:
    """Dollars spent against a limit (None: no limit, only counted); thread-safe."""

    def __init__(self, limit_usd: float | None, spent_usd: float = 0.0, hint: str = "") -> None:
        self.limit_usd, self.spent_usd, self.hint = limit_usd, spent_usd, hint
        self._lock = threading.Lock()

    def add(self, usd: float) -> None:
        with self._lock:
            self.spent_usd += max(0.0, float(usd))

    def check(self) -> None:
        if self.limit_usd is not None and self.spent_usd >= self.limit_usd:
            raise BudgetSpent(f"API budget ${self.limit_usd:.2f} spent (${self.spent_usd:.2f}); finished work is "
                              f"kept. {self.hint}".rstrip())
