"""payroll_audit verifier: named checks over `audit.csv` and `exceptions.json` (see docs/tasks.md).

It reads a `PayrollAuditSnapshot` (the text of the two output files, or why they could not be read, copied
out of the workspace), never the environment itself. Numbers are compared with a tolerance of 0.01, lists
as sets; the feedback names what is wrong but never the expected number.
"""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from tasks.payroll_audit import data as D
from tasks.records import TaskInstance, Verdict

CHECK_NAMES = ("audit_file_readable", "audit_columns", "department_rows", *D.AUDIT_COLUMNS[1:],
               "exceptions_file_readable", "missing_punch_list", "unknown_employee_list", "overtime_over_limit_list")


class OutputFile(BaseModel):
    """One output file as the workspace's file tools read it: its text, or the error they gave."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    text: str | None
    error: str = ""


class PayrollAuditSnapshot(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    audit: OutputFile
    exceptions: OutputFile


def verify(instance: TaskInstance, snap: PayrollAuditSnapshot) -> Verdict:
    exp = D.expected(D.PayrollData.model_validate(instance.payload["data"]))
    checks: dict[str, bool] = {}
    details: dict[str, str] = {}
    _check_audit(exp, snap.audit, checks, details)
    _check_exceptions(exp, snap.exceptions, checks, details)
    return Verdict.from_checks(checks, details)


def _read_audit(audit: OutputFile) -> tuple[list[dict[str, Any]], str | None]:
    """(the audit rows, None), or ([], why) when the file is missing or not CSV."""
    if audit.text is None:
        return [], audit.error
    try:
        return list(csv.DictReader(io.StringIO(audit.text))), None
    except csv.Error as e:
        return [], str(e)


def _check_audit(exp: D.Expected, audit: OutputFile, checks: dict[str, bool], details: dict[str, str]) -> None:
    rows, error = _read_audit(audit)
    checks["audit_file_readable"] = error is None
    if error is not None:
        details["audit_file_readable"] = f"{D.AUDIT_FILE} missing or unreadable: {error}"
    columns = list(rows[0].keys()) if rows else []
    got_cols = {(c or "").strip() for c in columns}
    checks["audit_columns"] = got_cols == set(D.AUDIT_COLUMNS)
    if not checks["audit_columns"]:
        missing = sorted(set(D.AUDIT_COLUMNS) - got_cols)
        extra = sorted(got_cols - set(D.AUDIT_COLUMNS))
        details["audit_columns"] = f"need exactly {D.AUDIT_COLUMNS}; missing {missing}, unexpected {extra}"
    by_dept: dict[str, dict[str, Any]] = {}
    dupes = []
    for r in rows:
        r = {(k or "").strip(): v for k, v in r.items()}
        dept = (r.get("department") or "").strip()
        if dept in by_dept:
            dupes.append(dept)
        by_dept[dept] = r
    checks["department_rows"] = set(by_dept) == set(exp.rows) and not dupes
    if not checks["department_rows"]:
        details["department_rows"] = (f"one row per roster department expected; missing "
                                      f"{sorted(set(exp.rows) - set(by_dept))}, unexpected "
                                      f"{sorted(set(by_dept) - set(exp.rows))}, duplicated {sorted(dupes)}")
    for col in D.AUDIT_COLUMNS[1:]:
        wrong = []
        for dept, want in exp.rows.items():
            got = _to_float(by_dept.get(dept, {}).get(col))
            if got is None or abs(got - want[col]) > D.TOLERANCE:
                wrong.append(f"{dept}={by_dept.get(dept, {}).get(col)!r}")
        checks[col] = not wrong
        if wrong:
            details[col] = f"wrong or missing (tolerance {D.TOLERANCE}) for: {', '.join(wrong)}"


def _check_exceptions(exp: D.Expected, exceptions: OutputFile, checks: dict[str, bool],
                      details: dict[str, str]) -> None:
    try:
        if exceptions.text is None:
            raise ValueError(exceptions.error)
        doc = json.loads(exceptions.text)
        ok = isinstance(doc, dict)
    except ValueError as e:  # json.JSONDecodeError is a ValueError
        doc, ok = {}, False
        details["exceptions_file_readable"] = f"{D.EXCEPTIONS_FILE} missing or not JSON: {e}"
    checks["exceptions_file_readable"] = ok
    if not ok:
        details.setdefault("exceptions_file_readable", f"{D.EXCEPTIONS_FILE} must hold a JSON object")
        doc = {}
    raw_missing = doc.get("missing_punch")
    got_missing: set[tuple[str, str]] | None = None
    if isinstance(raw_missing, list) and all(isinstance(x, dict) for x in raw_missing):
        got_missing = {(str(x.get("employee_id", "")), str(x.get("date", ""))) for x in raw_missing}
    _set_check(checks, details, "missing_punch_list", got_missing, set(exp.missing_punch),
               "a list of {employee_id, date} objects")
    _set_check(checks, details, "unknown_employee_list", _str_set(doc.get("unknown_employee")),
               set(exp.unknown_employee), "a list of employee ids")
    if exp.overtime_over_limit is not None:
        _set_check(checks, details, "overtime_over_limit_list", _str_set(doc.get("overtime_over_limit")),
                   set(exp.overtime_over_limit), "a list of employee ids")


def _set_check(checks: dict[str, bool], details: dict[str, str], name: str, got: set[Any] | None,
               want: set[Any], shape: str) -> None:
    checks[name] = got == want
    if got is None:
        details[name] = f"key missing or not {shape}"
    elif got != want:
        details[name] = f"{len(got - want)} entries should not be listed, {len(want - got)} entries are missing"


def _str_set(v: Any) -> set[str] | None:
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return {x.strip() for x in v}
    return None


def _to_float(v: Any) -> float | None:
    try:
        return float(str(v).strip())
    except (TypeError, ValueError):
        return None
