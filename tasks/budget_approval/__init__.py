"""budget_approval: decide purchase requests against the catalog, budgets and the approval policy."""

from __future__ import annotations

import random
from collections.abc import Sequence

from tasks.base import Environment, Family, instance_seed
from tasks.budget_approval.data import generate_payload, instruction
from tasks.budget_approval.env import BudgetApprovalEnv
from tasks.budget_approval.oracle import next_action
from tasks.records import FinalAnswer, Step, TaskInstance, ToolCall


class BudgetApproval(Family):
    name = "budget_approval"
    description = "Decide managers' purchase requests (total, approve/reject/escalate) in a company service."
    difficulties = ("easy", "hard")

    def generate(self, index: int) -> TaskInstance:
        rng = random.Random(instance_seed(self.name, index))
        difficulty = self.difficulties[index % 2]
        payload = generate_payload(rng, hard=difficulty == "hard")
        return self.new_instance(index, instruction=instruction(payload), difficulty=difficulty,
                                 payload=payload.model_dump())

    def make_env(self, instance: TaskInstance) -> BudgetApprovalEnv:
        return BudgetApprovalEnv(instance)

    def oracle_action(self, env: Environment, history: Sequence[Step]) -> ToolCall | FinalAnswer:
        if not isinstance(env, BudgetApprovalEnv):
            raise TypeError(f"budget_approval oracle needs a BudgetApprovalEnv, got {type(env).__name__}")
        return next_action(env)


__all__ = ["BudgetApproval", "BudgetApprovalEnv"]
