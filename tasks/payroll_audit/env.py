"""payroll_audit environment: workspace files in, `audit.csv` + `exceptions.json` out (judged in verify.py)."""

from __future__ import annotations

import csv
import io
import re
import zipfile
from pathlib import Path

from openpyxl import Workbook, load_workbook

from tasks.payroll_audit import data as D
from tasks.payroll_audit.verify import OutputFile, PayrollAuditSnapshot, verify
from tasks.records import Verdict
from tasks.runtime.workspace import MAX_FILE_BYTES, WorkspaceEnvironment
from tasks.tooling import ToolError, tool

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

    # --- what the verifier reads -------------------------------------------------------------------
    def _output(self, path: str) -> OutputFile:
        try:
            return OutputFile(text=self.read_text(path))
        except ToolError as e:
            return OutputFile(text=None, error=str(e))

    def snapshot(self) -> PayrollAuditSnapshot:
        return PayrollAuditSnapshot(audit=self._output(D.AUDIT_FILE), exceptions=self._output(D.EXCEPTIONS_FILE))

    def verify(self) -> Verdict:
        return verify(self.instance, self.snapshot())


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
