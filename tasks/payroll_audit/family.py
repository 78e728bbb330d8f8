"""payroll_audit family: generator (instruction + payload) and the oracle policy."""

from __future__ import annotations

import json
import random
from collections.abc import Sequence

from tasks.base import Environment, Family, instance_seed
from tasks.payroll_audit import data as D
from tasks.payroll_audit.environment import AUDIT_FILE, EXCEPTIONS_FILE, PayrollAuditEnv
from tasks.records import FinalAnswer, Step, TaskInstance, ToolCall
from tasks.tooling import ToolError


def _instruction(data: D.PayrollData) -> str:
    inputs = ["roster.csv (employees and departments)"]
    if data.rates_file:
        inputs.append("pay_rates.csv (hourly rates)")
    inputs += [f"{s} (attendance punches)" for s in data.sources]
    inputs.append("policy.md (lateness, break and overtime rules)")
    keys = '"missing_punch" (list of {"employee_id", "date"} objects), "unknown_employee" (list of ids)'
    if data.policy.overtime_limit_hours is not None:
        keys += ', "overtime_over_limit" (list of employee ids)'
    return (
        "You are auditing payroll for one pay period. The workspace holds: " + "; ".join(inputs) + ".\n"
        "Apply the rules in policy.md and write two files to the workspace:\n"
        f"1. `{AUDIT_FILE}` with exactly the columns {', '.join(D.AUDIT_COLUMNS)} and one row per department "
        "on the roster: headcount = roster employees of the department; days_worked = valid attendance rows; "
        "total_hours and overtime_hours = worked and overtime hours; late_arrivals = late valid rows; "
        "gross_pay = regular pay plus overtime pay. Do not round intermediate values; round the totals to "
        "2 decimals.\n"
        f"2. `{EXCEPTIONS_FILE}`, a JSON object with the keys {keys}.\n"
        "When both files are written, reply with a short summary."
    )


class PayrollAudit(Family):
    name = "payroll_audit"
    description = "Attendance CSV/XLSX + pay rates + policy -> per-department audit table and exception lists."
    difficulties = ("easy", "hard")

    def generate(self, index: int) -> TaskInstance:
        rng = random.Random(instance_seed(self.name, index))
        hard = index % 2 == 1  # alternate, so every split holds both levels
        data = D.generate(rng, hard)
        return self.new_instance(index, instruction=_instruction(data), difficulty="hard" if hard else "easy",
                                 payload={"data": data.model_dump(mode="json")})

    def make_env(self, instance: TaskInstance) -> Environment:
        return PayrollAuditEnv(instance)

    def oracle_action(self, env: Environment, history: Sequence[Step]) -> ToolCall | FinalAnswer:
        """Read the policy and each input once (as an analyst would), then write any output that is not
        already exactly right; the outputs come from the ground truth, so any reachable state is solvable."""
        assert isinstance(env, PayrollAuditEnv)
        data = env.data
        done = {(s.call.name, _path(s.call)) for s in history if not s.result.is_error}
        reads = [("read_file", "policy.md"), ("read_file", "roster.csv")]
        if data.rates_file:
            reads.append(("read_file", "pay_rates.csv"))
        reads += [("read_spreadsheet" if s.endswith(".xlsx") else "read_file", s) for s in data.sources]
        for name, path in reads:
            if (name, path) not in done and env.resolve(path).exists():
                return ToolCall(id=f"oracle-{len(history)}", name=name, arguments={"path": path})
        exp = D.expected(data)
        outputs = {
            AUDIT_FILE: D.audit_csv(exp),
            EXCEPTIONS_FILE: json.dumps(D.exceptions_doc(exp), indent=2) + "\n",
        }
        for path, content in outputs.items():
            if _current(env, path) != content:
                return ToolCall(id=f"oracle-{len(history)}", name="write_file",
                                arguments={"path": path, "content": content})
        return FinalAnswer(text=f"Wrote {AUDIT_FILE} ({len(exp.rows)} departments) and {EXCEPTIONS_FILE} "
                                f"({len(exp.missing_punch)} missing punches, "
                                f"{len(exp.unknown_employee)} unknown employees).")


def _path(call: ToolCall) -> str:
    return str(call.arguments.get("path", "")) if isinstance(call.arguments, dict) else ""


def _current(env: PayrollAuditEnv, path: str) -> str | None:
    try:
        return env.read_text(path)
    except ToolError:
        return None
