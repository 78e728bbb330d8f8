"""budget_approval: decide purchase requests against the catalog, budgets and the approval policy."""

from __future__ import annotations

from tasks.base import Family
from tasks.budget_approval.env import BudgetApprovalEnv


class BudgetApproval(Family):
    name = "budget_approval"
    description = "Decide managers' purchase requests (total, approve/reject/escalate) in a company service."
    env_class = BudgetApprovalEnv


__all__ = ["BudgetApproval", "BudgetApprovalEnv"]
