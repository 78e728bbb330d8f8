"""payroll_audit environment: workspace files in, `audit.csv` + `exceptions.json` out, judged by named checks."""

from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from pathlib import Path
from typing import Any

from openpyxl import Workbook, load_workbook

from tasks.payroll_audit import data as D
from tasks.records import Verdict
from tasks.tooling import ToolError, tool
from tasks.workspace import MAX_FILE_BYTES, WorkspaceEnvironment

AUDIT_FILE = "audit.csv"
EXCEPTIONS_FILE = "exceptions.json"
MAX_SHEET_ROWS = 5000
MAX_XLSX_UNCOMPRESSED = 20 << 20  # zip-bomb guard before openpyxl expands a file the agent may have written


class PayrollAuditEnv(WorkspaceEnvironment):
    @property
    def data(self) -> D.PayrollData:
        return D.PayrollData.model_validate(self.instance.payload["data"])

    def _populate(self, root: Path) -> None:
        data = self.data
        (root / "roster.csv").write_text(D.roster_csv(data))
        if data.rates_file:
            (root / "pay_rates.csv").write_text(D.rates_csv(data))
        (root / "policy.md").write_text(D.policy_md(data))
        for source in data.sources:
            if source.endswith(".xlsx"):
                wb = Workbook()
                ws = wb.active
                ws.title = "Punches"
                for row in D.attendance_xlsx_rows(data, source):
                    ws.append(row)
                wb.save(root / source)
                _normalise_zip(root / source)
            else:
                (root / source).write_text(D.attendance_csv(data, source))

    @tool
    def read_spreadsheet(self, path: str, sheet: str = "") -> str:
        """Read one sheet of an .xlsx workbook in the workspace as CSV text (first sheet by default).

        Args:
            path: path of the .xlsx file relative to the workspace.
            sheet: sheet name; empty for the first sheet.
        """
        real = self.resolve(path)
        if not real.is_file():
            raise ToolError(f"'{path}' does not exist or is not a file")
        if real.stat().st_size > MAX_FILE_BYTES:
            raise ToolError(f"'{path}' is larger than {MAX_FILE_BYTES} bytes")
        try:
            with zipfile.ZipFile(real) as z:
                if sum(i.file_size for i in z.infolist()) > MAX_XLSX_UNCOMPRESSED:
                    raise ToolError(f"'{path}' expands to more than {MAX_XLSX_UNCOMPRESSED} bytes")
            wb = load_workbook(real, read_only=True, data_only=True)
        except ToolError:
            raise
        except Exception as e:  # not a workbook: tell the model, do not crash
            raise ToolError(f"'{path}' is not a readable .xlsx workbook ({type(e).__name__})") from None
        try:
            names = wb.sheetnames
            if sheet and sheet not in names:
                raise ToolError(f"no sheet '{sheet}' in {path}; sheets: {', '.join(names)}")
            ws = wb[sheet or names[0]]
            buf = io.StringIO()
            writer = csv.writer(buf, lineterminator="\n")
            for i, row in enumerate(ws.iter_rows(values_only=True)):
                if i >= MAX_SHEET_ROWS:
                    buf.write(f"[more than {MAX_SHEET_ROWS} rows; truncated]\n")
                    break
                writer.writerow(["" if v is None else v for v in row])
            return f"sheets: {', '.join(names)}\nsheet {ws.title}:\n{buf.getvalue()}"
        finally:
            wb.close()

    # --- verifier -------------------------------------------------------------------------------
    def verify(self) -> Verdict:
        exp = D.expected(self.data)
        checks: dict[str, bool] = {}
        details: dict[str, str] = {}
        self._check_audit(exp, checks, details)
        self._check_exceptions(exp, checks, details)
        return Verdict.from_checks(checks, details)

    def _check_audit(self, exp: D.Expected, checks: dict[str, bool], details: dict[str, str]) -> None:
        numeric = D.AUDIT_COLUMNS[1:]
        try:
            rows = list(csv.DictReader(io.StringIO(self.read_text(AUDIT_FILE))))
            columns = list(rows[0].keys()) if rows else []
            checks["audit_file_readable"] = True
        except (ToolError, csv.Error) as e:
            checks["audit_file_readable"] = False
            details["audit_file_readable"] = f"{AUDIT_FILE} missing or unreadable: {e}"
            rows, columns = [], []
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
        for col in numeric:
            wrong = []
            for dept, want in exp.rows.items():
                got = _to_float(by_dept.get(dept, {}).get(col))
                if got is None or abs(got - want[col]) > D.TOLERANCE:
                    wrong.append(f"{dept}={by_dept.get(dept, {}).get(col)!r}")
            checks[col] = not wrong
            if wrong:
                details[col] = f"wrong or missing (tolerance {D.TOLERANCE}) for: {', '.join(wrong)}"

    def _check_exceptions(self, exp: D.Expected, checks: dict[str, bool], details: dict[str, str]) -> None:
        try:
            doc = json.loads(self.read_text(EXCEPTIONS_FILE))
            ok = isinstance(doc, dict)
        except (ToolError, json.JSONDecodeError) as e:
            doc, ok = {}, False
            details["exceptions_file_readable"] = f"{EXCEPTIONS_FILE} missing or not JSON: {e}"
        checks["exceptions_file_readable"] = ok
        if not ok:
            details.setdefault("exceptions_file_readable", f"{EXCEPTIONS_FILE} must hold a JSON object")
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


def _normalise_zip(path: Path) -> None:
    """openpyxl stamps the save time into docProps/core.xml and every zip entry; pin both so the workspace
    is byte-identical on every reset (replay must not see wall-clock time)."""
    with zipfile.ZipFile(path) as z:
        entries = [(i.filename, z.read(i.filename)) for i in z.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, blob in entries:
            if name == "docProps/core.xml":
                blob = re.sub(rb"(<dcterms:(?:created|modified)[^>]*>)[^<]*", rb"\g<1>2024-01-01T00:00:00Z", blob)
            z.writestr(zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0)), blob, zipfile.ZIP_DEFLATED)


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
