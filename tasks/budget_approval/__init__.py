"""budget_approval: decide purchase requests against the catalog, budgets and the approval policy."""

from __future__ import annotations

from tasks.base import ServiceFamily
from tasks.budget_approval import data, oracle
from tasks.budget_approval.env import BudgetApprovalEnv


class BudgetApproval(ServiceFamily):
    name = "budget_approval"
    description = "Decide managers' purchase requests (total, approve/reject/escalate) in a company service."
    env_class = BudgetApprovalEnv
    generate_payload = staticmethod(data.generate_payload)
    instruction = staticmethod(data.instruction)
    next_action = staticmethod(oracle.next_action)


__all__ = ["BudgetApproval", "BudgetApprovalEnv"]
