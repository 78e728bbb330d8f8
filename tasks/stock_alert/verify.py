"""stock_alert verifier: named checks over the sheet and the outbox (see docs/tasks_services.md).

It reads a `StockAlertSnapshot` (the spreadsheets and the sent emails, copied out of the environment),
never the environment itself.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

from tasks.records import TaskInstance, Verdict
from tasks.stock_alert.data import Product, StockPayload, expected_row, fields_of, low_stock, render

CHECK_NAMES = ("sheet_exists", "sheet_columns", "sheet_rows_complete", "sheet_rows_only_low_stock",
               "one_email_per_low_product", "email_fields", "no_extra_emails")


class Sheet(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    columns: list[str]
    rows: list[list[str]]


class Email(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    to: str
    subject: str
    body: str


class StockAlertSnapshot(BaseModel):
    """What the verifier reads: every sheet (title -> columns and rows) and the outbox in sending order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    sheets: dict[str, Sheet]
    outbox: list[Email]


_SKU_RE = re.compile(r"(?<![A-Z0-9-])[A-Z]{3}-\d+(?!\d)")  # the generator's SKU shape, e.g. KIT-4821


def _norm(text: str) -> str:
    return " ".join(str(text).split()).casefold()


def find_sheet(p: StockPayload, snap: StockAlertSnapshot) -> tuple[str, Sheet] | None:
    """The sheet the task asks for (title compared without case and extra spaces): (its title, the sheet)."""
    want = _norm(p.sheet_title)
    return next(((t, s) for t, s in snap.sheets.items() if _norm(t) == want), None)


def row_key(row: list[str]) -> tuple[str, ...]:
    return tuple(_norm(v) for v in row)


def emails_about(p: StockPayload, outbox: list[Email]) -> dict[str, list[int]]:
    """SKU -> indices of the emails whose subject or body names that SKU (any product, low or not)."""
    out: dict[str, list[int]] = {pr.sku: [] for pr in p.products}
    for i, m in enumerate(outbox):
        text = f"{m.subject}\n{m.body}".upper()
        for sku in sorted(set(_SKU_RE.findall(text))):
            if sku in out:
                out[sku].append(i)
    return out


_NUMBER_RE = re.compile(r"\d+(?:\.\d+)*")


def email_ok(p: StockPayload, product: Product, mail: Email) -> bool:
    to, subject, rendered = render(p, product)
    f = fields_of(p, product)
    body = _norm(mail.body)
    # The stock and threshold are stated, and the body states no number the rendered template does not
    # (a body listing 0..99 names every stock figure but states none).
    numbers_ok = (all(re.search(rf"(?<![\d.]){f[k]}(?!\.?\d)", mail.body) for k in ("stock", "threshold"))
                  and set(_NUMBER_RE.findall(mail.body)) <= set(_NUMBER_RE.findall(rendered)))
    return (
        mail.to.strip().casefold() == to.casefold()
        and _norm(mail.subject) == _norm(subject)
        and all(_norm(f[k]) in body for k in ("sku", "name", "supplier_name"))
        and numbers_ok
    )


def verify(instance: TaskInstance, snap: StockAlertSnapshot) -> Verdict:
    p = StockPayload.model_validate(instance.payload)
    low = low_stock(p)
    checks: dict[str, bool] = {}
    why: dict[str, str] = {}

    found = find_sheet(p, snap)
    sheet = found[1] if found else None
    checks["sheet_exists"] = sheet is not None
    why["sheet_exists"] = f'no sheet titled "{p.sheet_title}"'
    columns_ok = sheet is not None and [_norm(c) for c in sheet.columns] == [_norm(c) for c in p.columns]
    checks["sheet_columns"] = columns_ok
    why["sheet_columns"] = f"columns must be exactly {p.columns}, got {sheet.columns if sheet else None}"

    expected = {row_key(expected_row(p, pr)): pr.sku for pr in low}
    got = [row_key(r) for r in sheet.rows] if sheet and columns_ok else []
    missing = [sku for k, sku in expected.items() if k not in got]
    extra = [list(k) for k in got if k not in expected]
    dupes = len(got) - len(set(got))
    checks["sheet_rows_complete"] = columns_ok and not missing
    why["sheet_rows_complete"] = f"missing or wrong rows for {missing}" if columns_ok else "sheet columns wrong"
    checks["sheet_rows_only_low_stock"] = columns_ok and not extra and dupes == 0
    why["sheet_rows_only_low_stock"] = f"rows that are not low-stock products (or wrong values): {extra[:5]}" + (
        f"; {dupes} duplicate rows" if dupes else "")

    about = emails_about(p, snap.outbox)
    low_skus = {pr.sku for pr in low}
    counts = {pr.sku: len(about[pr.sku]) for pr in low}
    checks["one_email_per_low_product"] = all(c == 1 for c in counts.values())
    why["one_email_per_low_product"] = "emails per low-stock SKU should be 1: " + ", ".join(
        f"{s}={c}" for s, c in counts.items() if c != 1)
    bad_fields = [pr.sku for pr in low if counts[pr.sku] == 1 and not email_ok(p, pr, snap.outbox[about[pr.sku][0]])]
    checks["email_fields"] = checks["one_email_per_low_product"] and not bad_fields
    why["email_fields"] = (f"emails for {bad_fields} do not match the template (recipient = supplier email, "
                           "subject exactly as the template renders it, body with SKU, name, stock, threshold "
                           "and supplier name)")
    skus_in = [[s for s, idx in about.items() if i in idx] for i in range(len(snap.outbox))]
    stray = [i + 1 for i, skus in enumerate(skus_in) if len(skus) != 1 or skus[0] not in low_skus]
    checks["no_extra_emails"] = not stray
    why["no_extra_emails"] = f"emails {stray} are not about exactly one low-stock product"
    return Verdict.from_checks(checks, why)
