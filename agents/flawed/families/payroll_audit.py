"""payroll_audit faults: a skipped or forgotten attendance file, the policy's conventions, the outputs' format.

A belief changes the payroll data the student computes from (the oracle writes `expected(data)` of the
believed data), so a wrong convention runs through every figure it touches.
Knowledge keys (harness/evolution/cards/payroll_audit.yaml): late_strictly_after_grace,
break_deduction_over_six_hours, overtime_pay_multiplier, missing_punch_excluded, xlsx_twelve_hour_times.
"""

from __future__ import annotations

import json
from typing import Any

from agents.flawed.menu import Action, Belief, FamilyMenu, NotApplicable, Slip, call_of, read_before, with_args
from agents.flawed.views import set_instance_payload
from tasks.payroll_audit import data as D
from tasks.records import ToolCall


def _believe(view: Any, **changes: Any) -> None:
    data: D.PayrollData = view.data
    set_instance_payload(view, {**view.instance.payload, "data": data.model_copy(update=changes).model_dump(mode="json")})


def _policy(view: Any, **changes: Any) -> None:
    _believe(view, policy=view.data.policy.model_copy(update=changes))


def _week_files(env: Any) -> list[str]:
    sources = env.data.sources
    return list(sources) if len(sources) > 1 else []


def _read_not_written(env: Any) -> list[str]:
    return [] if env.resolve(D.AUDIT_FILE).exists() else list(env.data.sources)


def _was_read(env: Any, history: Any, unit: str) -> bool:
    return read_before(history, "read_spreadsheet" if unit.endswith(".xlsx") else "read_file",
                       lambda a: a.get("path") == unit)


def _skip_source(view: Any, unit: str) -> None:
    data: D.PayrollData = view.data
    _believe(view, sources=[s for s in data.sources if s != unit], punches=[p for p in data.punches if p.source != unit])


def _forget_source(view: Any, unit: str) -> None:
    _believe(view, punches=[p for p in view.data.punches if p.source != unit])


def _missing_paid(view: Any, unit: str) -> None:
    data: D.PayrollData = view.data
    start = data.policy.start_minute
    known = {e.employee_id for e in data.employees}
    _believe(view, punches=[p.model_copy(update={"clock_in": start, "clock_out": start + 8 * 60})
                            if p.employee_id in known and (p.clock_in is None or p.clock_out is None) else p
                            for p in data.punches])


def _hard(env: Any) -> list[str]:
    return [""] if len(env.data.sources) > 1 else []


def _pm_misread(view: Any, unit: str) -> None:
    def as_am(minute: int | None) -> int | None:
        return minute - 12 * 60 if minute is not None and minute >= 13 * 60 else minute
    _believe(view, punches=[p.model_copy(update={"clock_in": as_am(p.clock_in), "clock_out": as_am(p.clock_out)})
                            if p.source.endswith(".xlsx") else p for p in view.data.punches])


def _written(action: Action, path: str) -> ToolCall:
    call = call_of(action, "write_file")
    if call.arguments.get("path") != path:
        raise NotApplicable(f"not {path}")
    return call


def _audit_column(env: Any, action: Action) -> Action:
    call = _written(action, D.AUDIT_FILE)
    head, sep, rest = call.arguments["content"].partition("\n")
    return with_args(call, content=head.replace("overtime_hours", "overtime") + sep + rest)


def _exceptions_key(env: Any, action: Action) -> Action:
    call = _written(action, D.EXCEPTIONS_FILE)
    doc = json.loads(call.arguments["content"])
    doc.pop("unknown_employee", None)
    return with_args(call, content=json.dumps(doc, indent=2) + "\n")


def _audit_name(env: Any, action: Action) -> Action:
    return with_args(_written(action, D.AUDIT_FILE), path="audit_report.csv")


MENU = FamilyMenu(
    family="payroll_audit",
    beliefs=(
        Belief("skip_source", "planning", _week_files, _skip_source,
               "never reads {unit}; its punches are missing from every figure"),
        Belief("forget_source", "long_context", _read_not_written, _forget_source,
               "forgets the punches of {unit} it read earlier", cues=("attendance",), retrieved=_was_read),
        Belief("late_inclusive", "implicit_knowledge", lambda env: [""],
               lambda v, u: _policy(v, grace_minutes=v.data.policy.grace_minutes - 1),
               "counts an arrival exactly at start + grace as late", key="late_strictly_after_grace",
               cues=("late", "grace")),
        Belief("no_break_deduction", "implicit_knowledge", lambda env: [""], lambda v, u: _policy(v, break_minutes=0),
               "never deducts the unpaid break", key="break_deduction_over_six_hours", cues=("break",)),
        Belief("wrong_multiplier", "implicit_knowledge", lambda env: [""],
               lambda v, u: _policy(v, overtime_multiplier=2.0 if v.data.policy.overtime_multiplier == 1.5 else 1.5),
               "pays overtime at the other common multiplier", key="overtime_pay_multiplier",
               cues=("overtime", "multiplier")),
        Belief("missing_punch_paid", "implicit_knowledge", lambda env: [""], _missing_paid,
               "pays a row with a missing punch as an 8-hour day from the start time", key="missing_punch_excluded",
               cues=("missing punch", "missing_punch")),
        Belief("pm_misread", "implicit_knowledge", _hard, _pm_misread,
               "reads the spreadsheet's PM times as morning times", key="xlsx_twelve_hour_times",
               cues=("12-hour", "pm", "xlsx")),
    ),
    slips=(
        Slip("audit_column", "instruction_following", _audit_column, "wrote audit.csv with a renamed column",
             cues=("column", "audit")),
        Slip("exceptions_key", "instruction_following", _exceptions_key,
             "wrote exceptions.json without the unknown_employee key", cues=("exceptions", "unknown_employee")),
        Slip("audit_name", "instruction_following", _audit_name, "wrote the audit under another file name",
             cues=("audit.csv", "file name")),
    ),
    adjacent={
        "read_file": lambda c: ToolCall(name="read_spreadsheet", arguments={"path": c.arguments["path"]}),
        "write_file": lambda c: ToolCall(name="edit_file", arguments={"path": c.arguments["path"], "old_text": "",
                                                                        "new_text": c.arguments["content"]}),
        "read_spreadsheet": lambda c: ToolCall(name="read_file", arguments={"path": c.arguments["path"]}),
    },
    read_tools=frozenset({"read_file", "read_spreadsheet", "list_files"}),
    write_tools=frozenset({"write_file"}),
    not_applicable={
        "planning": "skip_source needs two attendance files (hard instances); easy ones get the generic planning "
                    "faults",
        "implicit_knowledge": "pm_misread only on hard instances (the XLSX file)",
    },
)
