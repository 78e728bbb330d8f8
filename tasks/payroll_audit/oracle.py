"""payroll_audit reference policy: read the policy and each input once (as an analyst would), then write any
output that is not already exactly right. The outputs come from the ground truth in the payload, so any
reachable state is solvable (also after an agent has damaged the inputs)."""

from __future__ import annotations

import json
from collections.abc import Sequence

from tasks.payroll_audit import data as D
from tasks.payroll_audit.env import PayrollAuditEnv
from tasks.records import FinalAnswer, Step, ToolCall
from tasks.tooling import ToolError


def next_action(env: PayrollAuditEnv, history: Sequence[Step]) -> ToolCall | FinalAnswer:
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
        D.AUDIT_FILE: D.audit_csv(exp),
        D.EXCEPTIONS_FILE: json.dumps(D.exceptions_doc(exp), indent=2) + "\n",
    }
    for path, content in outputs.items():
        if _current(env, path) != content:
            return ToolCall(id=f"oracle-{len(history)}", name="write_file",
                            arguments={"path": path, "content": content})
    return FinalAnswer(text=f"Wrote {D.AUDIT_FILE} ({len(exp.rows)} departments) and {D.EXCEPTIONS_FILE} "
                            f"({len(exp.missing_punch)} missing punches, "
                            f"{len(exp.unknown_employee)} unknown employees).")


def _path(call: ToolCall) -> str:
    return str(call.arguments.get("path", "")) if isinstance(call.arguments, dict) else ""


def _current(env: PayrollAuditEnv, path: str) -> str | None:
    try:
        return env.read_text(path)
    except ToolError:
        return None
