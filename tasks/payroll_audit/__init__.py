"""payroll_audit: department-level attendance and payroll audit from CSV/XLSX punches, rates and a policy."""

from __future__ import annotations

import random
from collections.abc import Sequence

from tasks.base import Draft, Environment, Family
from tasks.payroll_audit import data, oracle, verify
from tasks.payroll_audit.env import PayrollAuditEnv
from tasks.records import FinalAnswer, Step, ToolCall
from tasks.runtime.volatile import normalize_command_output


class PayrollAudit(Family):
    name = "payroll_audit"
    description = "Attendance CSV/XLSX + pay rates + policy -> per-department audit table and exception lists."
    difficulties = ("easy", "hard")
    check_names = verify.CHECK_NAMES
    env_class = PayrollAuditEnv

    def draft(self, index: int, rng: random.Random) -> Draft:
        return data.draft(index, rng)

    def oracle_action(self, env: Environment, history: Sequence[Step]) -> ToolCall | FinalAnswer:
        return oracle.next_action(self.own_env(env), history)

    def normalize_result(self, tool: str, content: str) -> str:
        return normalize_command_output(content)


__all__ = ["PayrollAudit", "PayrollAuditEnv"]
