"""payroll_audit data: the seeded generator, the workspace files it implies, and the ground truth.

Everything here is a pure function of the payload, so the environment, the verifier and the oracle agree.
"""

from __future__ import annotations

import csv
import io
import random
from datetime import date, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict

from tasks.base import Draft

DEPARTMENTS = ["Engineering", "Finance", "Sales", "Support", "Operations", "Marketing", "Legal", "Logistics"]
FIRST = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivan", "Jun", "Kofi", "Lena", "Mateo",
         "Nia", "Omar", "Priya", "Quinn", "Rosa", "Sven", "Tariq", "Uma", "Viktor", "Wen", "Yara", "Zoe"]
LAST = ["Abara", "Berg", "Costa", "Dubois", "Eriksen", "Fischer", "Garcia", "Haddad", "Ito", "Jansen", "Kim",
        "Lopez", "Moreau", "Novak", "Okafor", "Petrov", "Rossi", "Sato", "Tanaka", "Vargas", "Weber", "Young"]
AUDIT_COLUMNS = ["department", "headcount", "days_worked", "total_hours", "overtime_hours", "late_arrivals",
                 "gross_pay"]
TOLERANCE = 0.01
AUDIT_FILE = "audit.csv"
EXCEPTIONS_FILE = "exceptions.json"


class Employee(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    employee_id: str
    name: str
    department: str
    hourly_rate: float


class Punch(BaseModel):
    """One attendance row; times are minutes after midnight, None when the punch is missing."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    employee_id: str
    day: str
    clock_in: int | None
    clock_out: int | None
    source: str  # the file this row is written to


class Policy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    start_minute: int
    grace_minutes: int
    regular_hours: float
    overtime_multiplier: float
    break_after_hours: float
    break_minutes: int
    overtime_limit_hours: float | None  # hard instances: flag employees above it


class PayrollData(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    employees: list[Employee]
    punches: list[Punch]
    policy: Policy
    rates_file: bool  # hard: pay rates in their own file
    sources: list[str]


def generate(rng: random.Random, hard: bool) -> PayrollData:
    depts = rng.sample(DEPARTMENTS, rng.randint(4, 5) if hard else 3)
    employees: list[Employee] = []
    ids = rng.sample(range(100, 900), 40)
    for d in depts:
        for _ in range(rng.randint(3, 6) if hard else rng.randint(2, 4)):
            eid = f"E{ids.pop()}"
            name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
            rate = round(rng.randrange(72, 260) * 0.25, 2)
            employees.append(Employee(employee_id=eid, name=name, department=d, hourly_rate=rate))
    policy = Policy(
        start_minute=rng.choice([8 * 60, 8 * 60 + 30, 9 * 60]),
        grace_minutes=rng.choice([0, 5, 10]),
        regular_hours=8.0,
        overtime_multiplier=rng.choice([1.5, 1.25]),
        break_after_hours=6.0,
        break_minutes=30,
        overtime_limit_hours=float(rng.choice([3, 4, 5])) if hard else None,
    )
    first = date(2024, 1, 1) + timedelta(weeks=rng.randint(0, 40))  # a Monday
    days = [first + timedelta(days=w * 7 + d) for w in range(2 if hard else 1) for d in range(5)]
    sources = ["attendance_week1.csv", "attendance_week2.xlsx"] if hard else ["attendance.csv"]
    punches: list[Punch] = []
    for day in days:
        source = sources[0] if (day - first).days < 7 else sources[-1]
        for e in employees:
            if rng.random() < 0.1:
                continue  # absent
            cin = policy.start_minute + rng.randint(-20, 25)
            cout = cin + rng.randrange(6 * 60, 10 * 60 + 31, 5)
            punches.append(Punch(employee_id=e.employee_id, day=day.isoformat(), clock_in=cin, clock_out=cout,
                                 source=source))
    # at least one missing punch and one unknown badge per instance, so each exception list is exercised
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(punches))
        punches[i] = punches[i].model_copy(update={"clock_out": None})
    known = {e.employee_id for e in employees}
    for _ in range(rng.randint(2, 3) if hard else 1):
        ghost = f"E{rng.choice([i for i in range(900, 1000) if f'E{i}' not in known])}"
        day = rng.choice(days)
        source = sources[0] if (day - first).days < 7 else sources[-1]
        cin = policy.start_minute + rng.randint(-10, 10)
        punches.append(Punch(employee_id=ghost, day=day.isoformat(), clock_in=cin, clock_out=cin + 8 * 60,
                             source=source))
    punches.sort(key=lambda p: (p.day, p.employee_id))
    return PayrollData(employees=employees, punches=punches, policy=policy, rates_file=hard, sources=sources)


# --- formatting ----------------------------------------------------------------------------------
def hhmm(minute: int | None) -> str:
    return "" if minute is None else f"{minute // 60:02d}:{minute % 60:02d}"


def ampm(minute: int | None) -> str:
    if minute is None:
        return ""
    h, m = divmod(minute, 60)
    return f"{(h - 1) % 12 + 1}:{m:02d} {'AM' if h < 12 else 'PM'}"


def _csv(rows: list[list[Any]]) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue()


def roster_csv(data: PayrollData) -> str:
    head = ["employee_id", "name", "department"] + ([] if data.rates_file else ["hourly_rate"])
    rows = [[e.employee_id, e.name, e.department] + ([] if data.rates_file else [f"{e.hourly_rate:.2f}"])
            for e in data.employees]
    return _csv([head, *rows])


def rates_csv(data: PayrollData) -> str:
    return _csv([["employee_id", "hourly_rate"], *[[e.employee_id, f"{e.hourly_rate:.2f}"] for e in data.employees]])


def attendance_csv(data: PayrollData, source: str) -> str:
    rows = [[p.employee_id, p.day, hhmm(p.clock_in), hhmm(p.clock_out)] for p in data.punches if p.source == source]
    return _csv([["employee_id", "date", "clock_in", "clock_out"], *rows])


def attendance_xlsx_rows(data: PayrollData, source: str) -> list[list[str]]:
    """The XLSX sheet uses other headers and 12-hour times: the agent must normalise them."""
    rows = [[p.employee_id, p.day, ampm(p.clock_in), ampm(p.clock_out)] for p in data.punches if p.source == source]
    return [["Employee ID", "Date", "In", "Out"], *rows]


def policy_md(data: PayrollData) -> str:
    p = data.policy
    lines = [
        "# Attendance and overtime policy",
        "",
        f"- The scheduled start time is {hhmm(p.start_minute)}. An arrival is **late** when `clock_in` is more "
        f"than {p.grace_minutes} minutes after the start time (strictly later than "
        f"{hhmm(p.start_minute + p.grace_minutes)}).",
        f"- Worked time of a day is `clock_out - clock_in`; when that span is longer than "
        f"{p.break_after_hours:g} hours, an unpaid break of {p.break_minutes} minutes is deducted.",
        f"- Hours beyond {p.regular_hours:g} worked hours in a day are **overtime**, paid at "
        f"{p.overtime_multiplier:g}x the hourly rate; the other hours are paid at the hourly rate.",
        "- A row with a missing `clock_in` or `clock_out` is a **missing punch**: it is not paid, not counted "
        "as a day worked and not checked for lateness; report it as an exception.",
        "- An attendance row whose employee id is not on the roster is an **unknown employee**: it is ignored "
        "for all figures; report the id as an exception.",
    ]
    if p.overtime_limit_hours is not None:
        lines.append(f"- An employee whose total overtime over the whole period exceeds "
                     f"{p.overtime_limit_hours:g} hours (strictly more) must be reported for review "
                     "(**overtime over limit**).")
    return "\n".join(lines) + "\n"


# --- ground truth --------------------------------------------------------------------------------
class Expected(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    rows: dict[str, dict[str, float]]  # department -> column -> value
    missing_punch: list[tuple[str, str]]
    unknown_employee: list[str]
    overtime_over_limit: list[str] | None


def expected(data: PayrollData) -> Expected:
    p = data.policy
    by_id = {e.employee_id: e for e in data.employees}
    rows = {e.department: {c: 0.0 for c in AUDIT_COLUMNS[1:]} for e in data.employees}
    for e in data.employees:
        rows[e.department]["headcount"] += 1
    missing: list[tuple[str, str]] = []
    unknown: set[str] = set()
    overtime_by_emp: dict[str, float] = {}
    for punch in data.punches:
        emp = by_id.get(punch.employee_id)
        if emp is None:
            unknown.add(punch.employee_id)
            continue
        if punch.clock_in is None or punch.clock_out is None:
            missing.append((punch.employee_id, punch.day))
            continue
        span = punch.clock_out - punch.clock_in
        if span > p.break_after_hours * 60:
            span -= p.break_minutes
        hours = span / 60
        overtime = max(0.0, hours - p.regular_hours)
        row = rows[emp.department]
        row["days_worked"] += 1
        row["total_hours"] += hours
        row["overtime_hours"] += overtime
        row["late_arrivals"] += punch.clock_in > p.start_minute + p.grace_minutes
        row["gross_pay"] += emp.hourly_rate * ((hours - overtime) + overtime * p.overtime_multiplier)
        overtime_by_emp[emp.employee_id] = overtime_by_emp.get(emp.employee_id, 0.0) + overtime
    rows = {d: {c: round(v, 2) for c, v in r.items()} for d, r in rows.items()}
    over = None
    if p.overtime_limit_hours is not None:
        over = sorted(e for e, h in overtime_by_emp.items() if h > p.overtime_limit_hours + 1e-9)
    return Expected(rows=rows, missing_punch=sorted(missing), unknown_employee=sorted(unknown),
                    overtime_over_limit=over)


def audit_csv(exp: Expected) -> str:
    rows = [[d, *[_num(exp.rows[d][c]) for c in AUDIT_COLUMNS[1:]]] for d in sorted(exp.rows)]
    return _csv([AUDIT_COLUMNS, *rows])


def exceptions_doc(exp: Expected) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "missing_punch": [{"employee_id": e, "date": d} for e, d in exp.missing_punch],
        "unknown_employee": exp.unknown_employee,
    }
    if exp.overtime_over_limit is not None:
        doc["overtime_over_limit"] = exp.overtime_over_limit
    return doc


def _num(v: float) -> str:
    return str(int(v)) if float(v).is_integer() else f"{v:.2f}"


# --- the instance --------------------------------------------------------------------------------
def instruction(data: PayrollData) -> str:
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
        f"1. `{AUDIT_FILE}` with exactly the columns {', '.join(AUDIT_COLUMNS)} and one row per department "
        "on the roster: headcount = roster employees of the department; days_worked = valid attendance rows; "
        "total_hours and overtime_hours = worked and overtime hours; late_arrivals = late valid rows; "
        "gross_pay = regular pay plus overtime pay. Do not round intermediate values; round the totals to "
        "2 decimals.\n"
        f"2. `{EXCEPTIONS_FILE}`, a JSON object with the keys {keys}.\n"
        "When both files are written, reply with a short summary."
    )


def draft(index: int, rng: random.Random) -> Draft:
    """Even indices are easy, odd ones hard, so every split holds both levels."""
    hard = index % 2 == 1
    data = generate(rng, hard)
    return Draft(instruction=instruction(data), difficulty="hard" if hard else "easy",
                 payload={"data": data.model_dump(mode="json")})
