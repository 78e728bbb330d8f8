"""budget_approval: decide purchase requests against the catalog, budgets and the approval policy."""

from __future__ import annotations

import random
from collections.abc import Sequence

from tasks.base import Draft, Environment, Family
from tasks.budget_approval import data, oracle, verify
from tasks.budget_approval.env import BudgetApprovalEnv
from tasks.records import FinalAnswer, Step, ToolCall


class BudgetApproval(Family):
    name = "budget_approval"
    description = "Decide managers' purchase requests (total, approve/reject/escalate) in a company service."
    difficulties = ("easy", "hard")
    check_names = verify.CHECK_NAMES
    env_class = BudgetApprovalEnv

    def draft(self, index: int, rng: random.Random) -> Draft:
        return data.draft(index, rng)

    def oracle_action(self, env: Environment, history: Sequence[Step]) -> ToolCall | FinalAnswer:
        return oracle.next_action(self.own_env(env), history)


__all__ = ["BudgetApproval", "BudgetApprovalEnv"]
