"""payroll_audit: generation, verifier rejections, malformed tool calls, replay."""

from __future__ import annotations

import csv
import io
import json

import pytest
from tasks_helpers import instances_in_fresh_process, solve

import tasks
from tasks.base import SPLIT_RANGES
from tasks.payroll_audit import data as D
from tasks.payroll_audit.env import PayrollAuditEnv
from tasks.records import ToolCall
from tasks.tooling import MAX_STRING_ARG_CHARS

FAMILY = "payroll_audit"


@pytest.fixture
async def solved():
    """A hard instance (CSV + XLSX + rates file) solved by the oracle; the env stays open for edits."""
    fam = tasks.get(FAMILY)
    env = fam.make_env(fam.generate(3))
    env.reset()
    await solve(env)
    assert env.verify().score == 1.0
    yield env
    env.close()


def _audit(env: PayrollAuditEnv) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(env.read_text("audit.csv"))))


async def _write_audit(env: PayrollAuditEnv, rows: list[dict[str, str]], columns: list[str]) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    r = await env.call("write_file", {"path": "audit.csv", "content": buf.getvalue()})
    assert not r.is_error


def test_generation_is_deterministic_across_processes():
    here = [tasks.get(FAMILY).generate(i).model_dump(mode="json") for i in (0, 1, 57)]
    assert instances_in_fresh_process(FAMILY, [0, 1, 57]) == here


def test_every_split_has_both_difficulties_and_exceptions_are_exercised():
    fam = tasks.get(FAMILY)
    for split, rng in SPLIT_RANGES.items():
        assert {fam.generate(i).difficulty for i in rng} == {"easy", "hard"}, split
    over = [D.expected(D.PayrollData.model_validate(fam.generate(i).payload["data"])).overtime_over_limit
            for i in range(1, 40, 2)]
    assert any(over) and all(o is not None for o in over)


async def test_off_by_one_total_is_rejected(solved):
    rows = _audit(solved)
    rows[0]["gross_pay"] = f"{float(rows[0]['gross_pay']) + 1:.2f}"
    rows[1]["late_arrivals"] = str(int(rows[1]["late_arrivals"]) + 1)
    await _write_audit(solved, rows, D.AUDIT_COLUMNS)
    v = solved.verify()
    assert v.score < 1.0 and {"gross_pay", "late_arrivals"} <= set(v.failed_checks)
    assert rows[0]["department"] in v.feedback


async def test_within_tolerance_is_accepted(solved):
    rows = _audit(solved)
    rows[0]["total_hours"] = f"{float(rows[0]['total_hours']) + 0.005:.3f}"
    await _write_audit(solved, rows, D.AUDIT_COLUMNS)
    assert solved.verify().score == 1.0


async def test_missing_department_row_is_rejected(solved):
    await _write_audit(solved, _audit(solved)[1:], D.AUDIT_COLUMNS)
    v = solved.verify()
    assert "department_rows" in v.failed_checks and v.score < 1.0


async def test_wrong_column_name_is_rejected(solved):
    rows = [{("late_count" if k == "late_arrivals" else k): v for k, v in r.items()} for r in _audit(solved)]
    cols = [("late_count" if c == "late_arrivals" else c) for c in D.AUDIT_COLUMNS]
    await _write_audit(solved, rows, cols)
    v = solved.verify()
    assert {"audit_columns", "late_arrivals"} <= set(v.failed_checks)
    assert "late_arrivals" in v.feedback


async def test_incomplete_exception_lists_are_rejected(solved):
    doc = json.loads(solved.read_text("exceptions.json"))
    doc["missing_punch"] = doc["missing_punch"][1:]
    doc["unknown_employee"] = doc["unknown_employee"] + ["E000"]
    doc.pop("overtime_over_limit")
    await solved.call("write_file", {"path": "exceptions.json", "content": json.dumps(doc)})
    v = solved.verify()
    assert {"missing_punch_list", "unknown_employee_list", "overtime_over_limit_list"} <= set(v.failed_checks)


async def test_unparseable_outputs_score_zero_without_raising(solved):
    await solved.call("write_file", {"path": "exceptions.json", "content": "{not json"})
    await solved.call("write_file", {"path": "audit.csv", "content": "\x00\x01"})
    v = solved.verify()
    assert v.score == 0.0 and "exceptions_file_readable" in v.failed_checks


async def test_malformed_tool_calls_are_errors_and_write_nothing():
    fam = tasks.get(FAMILY)
    with fam.make_env(fam.generate(2)) as env:
        env.reset()
        before = sorted(p.name for p in env.workspace.iterdir())
        cases = [
            ("no_such_tool", {}),
            ("write_file", "{not json"),
            ("write_file", "[1, 2]"),
            ("write_file", {"path": "a.csv"}),  # missing content
            ("write_file", {"path": "a.csv", "content": "x", "mode": "append"}),  # extra argument
            ("write_file", {"path": ["a.csv"], "content": "x"}),  # wrong type
            ("write_file", {"path": "a.csv", "content": "x" * (MAX_STRING_ARG_CHARS + 1)}),  # huge string
            ("read_file", {"path": "roster.csv", "start_line": "first"}),
            ("edit_file", {"path": "roster.csv", "old_text": "E", "new_text": "X"}),  # ambiguous: many matches
            ("read_spreadsheet", {"path": "roster.csv"}),  # not a workbook
            ("shell", {"command": "true", "timeout_s": 999}),
        ]
        roster = env.read_text("roster.csv")
        for name, args in cases:
            r = await env.call(name, args)
            assert r.is_error, (name, args, r.content)
            assert r.content.startswith("Error: ")
        assert sorted(p.name for p in env.workspace.iterdir()) == before
        assert env.read_text("roster.csv") == roster


async def test_read_spreadsheet_shows_the_xlsx_sheet():
    fam = tasks.get(FAMILY)
    with fam.make_env(fam.generate(1)) as env:
        env.reset()
        r = await env.call("read_spreadsheet", {"path": "attendance_week2.xlsx"})
        assert not r.is_error and "Employee ID,Date,In,Out" in r.content and (" AM" in r.content)
        r = await env.call("read_spreadsheet", {"path": "attendance_week2.xlsx", "sheet": "Nope"})
        assert r.is_error and "Punches" in r.content


async def test_replay_reaches_the_same_state_and_results():
    fam = tasks.get(FAMILY)
    with fam.make_env(fam.generate(5)) as env:
        env.reset()
        history = await solve(env)
        extra = [ToolCall(name="shell", arguments={"command": "wc -l roster.csv > n.txt; cat n.txt"}),
                 ToolCall(name="python", arguments={"code": "print(sorted({'b', 'a', 'c'}))"})]
        calls = [s.call for s in history] + extra
        first = await env.replay(calls)
        files1 = {p.name: p.read_bytes() for p in env.workspace.iterdir() }
        second = await env.replay(calls)
        files2 = {p.name: p.read_bytes() for p in env.workspace.iterdir() }
        assert [s.result for s in first] == [s.result for s in second]
        assert files1 == files2 and env.verify().score == 1.0
