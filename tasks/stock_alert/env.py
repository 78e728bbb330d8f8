"""stock_alert environment: inventory service, spreadsheet service and email outbox, all in memory.

Every tool validates its whole input before it touches state, so an error result never half-writes.
"""

from __future__ import annotations

import json
from typing import Any

from tasks.base import Environment
from tasks.records import Verdict
from tasks.stock_alert.data import PAGE_SIZE, StockPayload
from tasks.stock_alert.verify import Email, Sheet, StockAlertSnapshot, verify
from tasks.tooling import ToolError, tool

MAX_CELL_CHARS = 500
MAX_SHEETS = 20
MAX_ROWS_PER_SHEET = 500
MAX_EMAILS = 200
MAX_EMAIL_CHARS = 10_000

Cell = str | int | float


class StockAlertEnv(Environment):
    payload: StockPayload

    def _setup(self) -> None:
        self.payload = StockPayload.model_validate(self.instance.payload)
        self.sheets: dict[str, dict[str, Any]] = {}  # title -> {"columns": [...], "rows": [[str, ...], ...]}
        self.outbox: list[dict[str, str]] = []
        self.pages_seen: set[int] = set()
        self.seen_template = False
        self.seen_suppliers = False

    def snapshot(self) -> StockAlertSnapshot:
        sheets = {t: Sheet(columns=list(sh["columns"]), rows=[list(r) for r in sh["rows"]])
                  for t, sh in self.sheets.items()}
        return StockAlertSnapshot(sheets=sheets, outbox=[Email(**m) for m in self.outbox])

    def verify(self) -> Verdict:
        return verify(self.instance, self.snapshot())

    def state(self) -> dict[str, Any]:
        """The mutable state as plain data (tests compare it; replay must reproduce it)."""
        return {
            "sheets": json.loads(json.dumps(self.sheets)), "outbox": list(self.outbox),
            "pages_seen": sorted(self.pages_seen), "seen_template": self.seen_template,
            "seen_suppliers": self.seen_suppliers,
        }

    def n_pages(self) -> int:
        return max(1, -(-len(self.payload.products) // PAGE_SIZE))

    # --- inventory ----------------------------------------------------------------------------
    @tool
    def list_products(self, page: int = 1) -> dict[str, Any]:
        """List the shop's products, one page at a time.

        Args:
            page: 1-based page number; the answer says how many pages there are.
        """
        pages = self.n_pages()
        if not 1 <= page <= pages:
            raise ToolError(f"page must be between 1 and {pages}")
        self.pages_seen.add(page)
        chunk = self.payload.products[(page - 1) * PAGE_SIZE: page * PAGE_SIZE]
        hard = self.payload.global_threshold is None
        rows = []
        for p in chunk:
            row: dict[str, Any] = {"sku": p.sku, "name": p.name, "category": p.category, "stock": p.stock,
                                   "supplier_id": p.supplier_id}
            if hard:
                row["reorder_level"] = p.reorder_level
                row["status"] = "discontinued" if p.discontinued else "active"
            rows.append(row)
        return {"page": page, "pages": pages, "total_products": len(self.payload.products), "products": rows}

    @tool
    def list_suppliers(self) -> list[dict[str, str]]:
        """List the suppliers (id, name, email) that products refer to by supplier_id."""
        self.seen_suppliers = True
        return [s.model_dump() for s in self.payload.suppliers]

    @tool
    def get_email_template(self) -> dict[str, Any]:
        """The low-stock alert email template: subject and body with {placeholders} to fill in."""
        self.seen_template = True
        return {
            "subject": self.payload.template.subject, "body": self.payload.template.body,
            "placeholders": {
                "sku": "product SKU", "name": "product name", "stock": "units in stock",
                "threshold": "the low-stock threshold that applied to the product",
                "supplier_name": "the supplier's name", "store": "the shop's name",
            },
        }

    # --- spreadsheets -------------------------------------------------------------------------
    def _sheet(self, title: str) -> dict[str, Any]:
        title = title.strip()
        if title not in self.sheets:
            known = ", ".join(f'"{t}"' for t in self.sheets) or "(none)"
            raise ToolError(f'no sheet titled "{title[:100]}"; existing sheets: {known}')
        return self.sheets[title]

    @tool
    def list_sheets(self) -> list[dict[str, Any]]:
        """List the spreadsheets: title, columns and number of rows."""
        return [{"title": t, "columns": s["columns"], "rows": len(s["rows"])} for t, s in self.sheets.items()]

    @tool
    def create_sheet(self, title: str, columns: list[str]) -> str:
        """Create an empty spreadsheet with a header row.

        Args:
            title: sheet title (unique).
            columns: column names, in order.
        """
        title = title.strip()
        if not title or len(title) > 100:
            raise ToolError("title must be 1..100 characters")
        if title in self.sheets:
            raise ToolError(f'a sheet titled "{title}" already exists; use it or delete_sheet first')
        if len(self.sheets) >= MAX_SHEETS:
            raise ToolError(f"at most {MAX_SHEETS} sheets")
        if not 1 <= len(columns) <= 30 or any(not c.strip() or len(c) > 100 for c in columns):
            raise ToolError("columns must be 1..30 non-empty names of at most 100 characters")
        if len({c.strip() for c in columns}) != len(columns):
            raise ToolError("column names must be unique")
        self.sheets[title] = {"columns": [c.strip() for c in columns], "rows": []}
        return f'created sheet "{title}" with columns {[c.strip() for c in columns]}'

    @tool(max_list_items=MAX_ROWS_PER_SHEET)
    def append_rows(self, title: str, rows: list[list[Cell]]) -> str:
        """Append rows to a sheet; each row has one value per column, in column order.

        Args:
            title: sheet title.
            rows: list of rows, each a list of cell values (strings or numbers).
        """
        sheet = self._sheet(title)
        width = len(sheet["columns"])
        if not rows:
            raise ToolError("rows is empty")
        for i, row in enumerate(rows):
            if len(row) != width:
                raise ToolError(f"row {i} has {len(row)} values; the sheet has {width} columns {sheet['columns']}")
            if any(len(str(v)) > MAX_CELL_CHARS for v in row):
                raise ToolError(f"row {i} has a cell over {MAX_CELL_CHARS} characters")
        if len(sheet["rows"]) + len(rows) > MAX_ROWS_PER_SHEET:
            raise ToolError(f"a sheet holds at most {MAX_ROWS_PER_SHEET} rows")
        sheet["rows"].extend([[cell_text(v) for v in row] for row in rows])
        return f'appended {len(rows)} rows to "{title}" (now {len(sheet["rows"])} rows)'

    @tool
    def read_sheet(self, title: str) -> dict[str, Any]:
        """Read a sheet: its columns and numbered rows (row numbers start at 1).

        Args:
            title: sheet title.
        """
        sheet = self._sheet(title)
        return {"title": title, "columns": sheet["columns"],
                "rows": [{"row": i + 1, "values": r} for i, r in enumerate(sheet["rows"])]}

    @tool(max_list_items=MAX_ROWS_PER_SHEET)
    def delete_rows(self, title: str, row_numbers: list[int]) -> str:
        """Delete rows from a sheet by their 1-based row numbers (as shown by read_sheet).

        Args:
            title: sheet title.
            row_numbers: row numbers to delete.
        """
        sheet = self._sheet(title)
        n = len(sheet["rows"])
        bad = [r for r in row_numbers if not 1 <= r <= n]
        if not row_numbers or bad:
            raise ToolError(f"row numbers must be between 1 and {n}; got {bad or 'none'}")
        drop = set(row_numbers)
        sheet["rows"] = [r for i, r in enumerate(sheet["rows"]) if i + 1 not in drop]
        return f'deleted {len(drop)} rows from "{title}" (now {len(sheet["rows"])} rows)'

    @tool
    def delete_sheet(self, title: str) -> str:
        """Delete a whole sheet.

        Args:
            title: sheet title.
        """
        self._sheet(title)
        del self.sheets[title.strip()]
        return f'deleted sheet "{title}"'

    # --- email --------------------------------------------------------------------------------
    @tool
    def send_email(self, to: str, subject: str, body: str) -> str:
        """Send an email (it cannot be recalled).

        Args:
            to: one recipient address.
            subject: subject line.
            body: plain-text body.
        """
        to = to.strip()
        if "@" not in to or " " in to or "," in to or len(to) > 200:
            raise ToolError("'to' must be exactly one email address")
        if not subject.strip():
            raise ToolError("subject is empty")
        if len(subject) > 500 or len(body) > MAX_EMAIL_CHARS:
            raise ToolError(f"subject is limited to 500 and body to {MAX_EMAIL_CHARS} characters")
        if len(self.outbox) >= MAX_EMAILS:
            raise ToolError(f"the outbox is full ({MAX_EMAILS} emails)")
        self.outbox.append({"to": to, "subject": subject, "body": body})
        return f"email {len(self.outbox)} sent to {to}"

    @tool
    def list_outbox(self) -> list[dict[str, Any]]:
        """List the emails sent so far."""
        return [{"id": i + 1, **m} for i, m in enumerate(self.outbox)]


def cell_text(v: Cell) -> str:
    """Sheet cells are stored as text; 12.0 and 12 both read back as '12'."""
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v).strip()
