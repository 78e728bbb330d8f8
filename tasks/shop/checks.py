"""Verifier pieces both browser families share: answer matching and database-state diffs.

Edits are checked tau-bench style: the expected state is the initial database with the gold changes
applied; each gold change is one item of the check "requested_changes" (each expected new row one item of
"new_row_created", each of its fields one of "new_row_fields") and everything else must be untouched
("no_collateral_changes"). Checks are returned as {check name: [(passed, why not), ...]} for
`Verdict.from_items`: the names are fixed, the items depend on the instance.
"""

from __future__ import annotations

import re
from typing import Any

from tasks.shop.data import MUTABLE_TABLES, Shop

Items = dict[str, list[tuple[bool, str]]]

_NUM_RE = re.compile(r"(?<![\w.\-])\$?(\d[\d,]*(?:\.\d+)?)(?![\w\-]|\.\d)")


def numbers_in(text: str) -> list[float]:
    out = []
    for m in _NUM_RE.finditer(text):
        try:
            out.append(float(m.group(1).replace(",", "")))
        except ValueError:
            continue
    return out


def check_number(answer: str, expected: float, instruction: str) -> tuple[bool, str]:
    """Pass iff the answer states `expected` and no competing number (numbers quoted from the question,
    such as a year, are ignored): '3' and 'There were 3 in 2023' pass; '3 or 4' and '' fail."""
    given = set(numbers_in(instruction))
    found = [x for x in numbers_in(answer) if abs(x - expected) < 0.005 or x not in given]
    if not found:
        return False, "the answer states no number"
    wrong = sorted({x for x in found if abs(x - expected) >= 0.005})
    if wrong:
        return False, f"the answer states {', '.join(f'{x:g}' for x in wrong)}, not the correct value"
    return True, ""


def check_names(answer: str, expected: list[str], catalog: list[str]) -> Items:
    """'answer_names': one item per expected product name; 'no_extra_products': no more names than asked."""
    low = answer.lower()
    named = [n for n in catalog if n.lower() in low]
    return {
        "answer_names": [(name.lower() in low, f"'{name}' is missing from the answer") for name in expected],
        "no_extra_products": [(len(named) <= len(expected), f"the answer names {len(named)} products: "
                               f"{', '.join(named)}; expected only {len(expected)}")],
    }


def initial_tables(shop: Shop) -> dict[str, list[dict]]:
    """The mutable tables of a freshly written database (same shape as `dump_tables`)."""
    tables: dict[str, list[dict]] = {}
    for table, key in MUTABLE_TABLES.items():
        rows = [dict(r) for r in getattr(shop, table)]
        if table == "discount_rules":
            for r in rows:
                r.pop("id", None)
        tables[table] = sorted(rows, key=lambda r: tuple(str(r[k]) for k in key))
    return tables


def diff_checks(initial: dict[str, list[dict]], final: dict[str, list[dict]], changes: list[dict[str, Any]],
                new_rows: list[dict[str, Any]] | None = None) -> Items:
    """Items per gold change ({table, key, field, value}) and per expected new row ({table, row}, matched by
    the table's key: one item for its existence, one per field), and 'no_collateral_changes'."""
    checks: Items = {}
    index = {t: {tuple(str(r[k]) for k in MUTABLE_TABLES[t]): r for r in rows} for t, rows in final.items()}
    touched: set[tuple[str, tuple[str, ...], str]] = set()
    for c in changes:
        k = (str(c["key"]),)
        row = index[c["table"]].get(k)
        got = None if row is None else row.get(c["field"])
        what = f"{c['table']}[{c['key']}].{c['field']} should be {c['value']}"
        checks.setdefault("requested_changes", []).append(
            (got == c["value"], f"{what}: the row is missing" if row is None else f"{what}: it is {got!r}"))
        touched.add((c["table"], k, c["field"]))
    added = _new_row_checks(index, new_rows or [], checks)
    checks["no_collateral_changes"] = [_collateral(initial, index, touched, added)]
    return checks


def _new_row_checks(index: dict[str, dict[tuple[str, ...], dict]], new_rows: list[dict[str, Any]],
                    checks: Items) -> set[tuple[str, tuple[str, ...]]]:
    added: set[tuple[str, tuple[str, ...]]] = set()
    for n in new_rows:
        table, want = n["table"], n["row"]
        k = tuple(str(want[x]) for x in MUTABLE_TABLES[table])
        row = index[table].get(k)
        added.add((table, k))
        label = f"{table}[{'/'.join(k)}]"
        checks.setdefault("new_row_created", []).append((row is not None, f"no row {label} was created"))
        for field, value in want.items():
            if field in MUTABLE_TABLES[table]:
                continue
            got = None if row is None else row.get(field)
            what = f"{label}.{field} should be {value}"
            checks.setdefault("new_row_fields", []).append(
                (got == value, f"{what}: the row is missing" if row is None else f"{what}: it is {got!r}"))
    return added


def _collateral(initial: dict[str, list[dict]], index: dict[str, dict[tuple[str, ...], dict]],
                touched: set[tuple[str, tuple[str, ...], str]],
                added: set[tuple[str, tuple[str, ...]]]) -> tuple[bool, str]:
    """Every field of every initial row unchanged unless a gold change names it; no unexpected rows."""
    problems: list[str] = []
    for table, rows in initial.items():
        keyf = MUTABLE_TABLES[table]
        before = {tuple(str(r[k]) for k in keyf): r for r in rows}
        after = index[table]
        for k, r in before.items():
            if k not in after:
                problems.append(f"{table}[{'/'.join(k)}] was deleted")
                continue
            for field, v in r.items():
                if (table, k, field) not in touched and after[k].get(field) != v:
                    problems.append(f"{table}[{'/'.join(k)}].{field} changed from {v!r} to {after[k].get(field)!r}")
        for k in after:
            if k not in before and (table, k) not in added:
                problems.append(f"unexpected new row {table}[{'/'.join(k)}]")
    return not problems, "; ".join(problems[:5]) + (" ..." if len(problems) > 5 else "")
