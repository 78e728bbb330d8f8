"""anomaly_detection, a show-your-work demonstration policy (for training the micro student; the pure oracle in
oracle.py is unchanged and stays the reference).

Every value it writes is derivable from what the trajectory shows, with as little copying as possible.
`program="values"`: 1. `describe_tables`, 2. `bucket_get` the parameter file (so it is the last
thing before the query), 3. ONE SQL program that is the same text for every instance of a difficulty except
for short copies: each range, override and maintenance window of the parameter file as a VALUES row (the id
or kind, then its two numbers or timestamps, in the file's order), and the window bounds from the
instruction. `program="paste"` (the default; every committed M0 was trained on it): 1. `bucket_get`,
2. `describe_tables`, 3. the parameter file pasted verbatim as a string literal, read with SQLite's JSON
functions. `program="flag"` (M1): the "values" program opening with its decision,
`WITH k(bounds_normal) AS (VALUES (1))` (0 when the item is missed), read by the query's last part. Each query
computes the whole report as one CSV text cell; 4. `bucket_put` that cell verbatim
(a contiguous copy of the query result). It never reads the ground truth.

`knows` names the knowledge items (harness/evolution/cards/anomaly_detection.yaml) the policy applies; the
caller decides it (training/micro/policies.py). Without `bounds_are_normal` the query reports readings exactly at
a bound (`value <= lo OR value >= hi`), which the instances plant on purpose (two per sensor), so the report's
precision fails.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any

from tasks.anomaly_detection.data import PARAMS_KEY
from tasks.anomaly_detection.env import AnomalyDetectionEnv
from tasks.records import FinalAnswer, Step, TaskInstance, ToolCall

_WINDOW = re.compile(r"window \[(\S+), (\S+)\)")
_REPORT = re.compile(r"bucket at (\S+?\.csv)")
# sensor id, timestamp, value of every reading in [start, end) outside its range; `rs` is the readings with
# their sensor's code, kind and range.
_EASY = ("WITH p(j) AS (SELECT '{params}'), "
         "rs AS (SELECT r.sensor_id AS sid, r.ts AS ts, r.value AS value, "
         "json_extract(p.j, '$.sensors.\"' || r.sensor_id || '\".min') AS lo, "
         "json_extract(p.j, '$.sensors.\"' || r.sensor_id || '\".max') AS hi FROM p, readings r), ")
# (SQLite's json_each is refused by the warehouse's read-only policy; a recursive CTE walks the array instead.)
_HARD = ("WITH RECURSIVE p(j) AS (SELECT '{params}'), "
         "i(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM i, p WHERE n + 1 < json_array_length(p.j, '$.maintenance')), "
         "m AS (SELECT json_extract(p.j, '$.maintenance[' || n || '].sensor_id') AS sid, "
         "json_extract(p.j, '$.maintenance[' || n || '].start') AS t0, "
         "json_extract(p.j, '$.maintenance[' || n || '].end') AS t1 FROM p, i), "
         "rs AS (SELECT s.sensor_id AS sid, r.ts AS ts, r.value AS value, "
         "coalesce(json_extract(p.j, '$.overrides.\"' || s.sensor_id || '\".min'), "
         "json_extract(p.j, '$.defaults_by_kind.' || s.kind || '.min')) AS lo, "
         "coalesce(json_extract(p.j, '$.overrides.\"' || s.sensor_id || '\".max'), "
         "json_extract(p.j, '$.defaults_by_kind.' || s.kind || '.max')) AS hi "
         "FROM p, readings r JOIN sensors s ON s.sensor_pk = r.sensor_pk "
         "WHERE NOT EXISTS (SELECT 1 FROM m WHERE m.sid = s.sensor_id AND r.ts >= m.t0 AND r.ts < m.t1)), ")
# The "values" program (tried for a third M0 build, 2026-12-02; docs/students.md): no pasted file. Each bound
# is copied from the parameter file into a VALUES row, a short copy per value; the pasted file had to be copied
# while JSON-escaping it (the tool call's arguments are JSON: every quote and line break of the file changes
# form), which M0 never learned.
_EASY_VALUES = ("WITH b(sid, lo, hi) AS (VALUES {sensors}), "
                "rs AS (SELECT r.sensor_id AS sid, r.ts AS ts, r.value AS value, b.lo AS lo, b.hi AS hi "
                "FROM readings r JOIN b ON b.sid = r.sensor_id), ")
_HARD_VALUES = ("WITH d(kind, lo, hi) AS (VALUES {defaults}), o(sid, lo, hi) AS (VALUES {overrides}), "
                "m(sid, t0, t1) AS (VALUES {maintenance}), "
                "rs AS (SELECT s.sensor_id AS sid, r.ts AS ts, r.value AS value, coalesce(o.lo, d.lo) AS lo, "
                "coalesce(o.hi, d.hi) AS hi FROM readings r JOIN sensors s ON s.sensor_pk = r.sensor_pk "
                "JOIN d ON d.kind = s.kind LEFT JOIN o ON o.sid = s.sensor_id "
                "WHERE NOT EXISTS (SELECT 1 FROM m WHERE m.sid = s.sensor_id AND r.ts >= m.t0 AND r.ts < m.t1)), ")
# The "flag" program (M1, 2026-12-06): the "values" program whose first line is the decision, a named flag
# (`WITH k(bounds_normal) AS (VALUES (1))`), as payroll_audit's `deduct_break = True` is; the tail reads the flag
# instead of writing `<` or `<=` 200-odd tokens into the query, after the copied rows (docs/students.md, M1).
_FLAG = "WITH k(bounds_normal) AS (VALUES ({flag})), "
PROGRAMS = ("paste", "values", "flag")  # "paste": the program every committed M0 was trained on
ALL_KNOWN = frozenset({"bounds_are_normal"})
# the readings of `source` in [start, end) that `outside` selects, and the report of them as one CSV cell
_TAIL = ("a AS (SELECT DISTINCT sid, ts, value FROM {source} WHERE ts >= '{start}' AND ts < '{end}' "
         "AND ({outside}) ORDER BY sid, ts) "
         "SELECT 'sensor_id,timestamp,value' || char(10) || group_concat(sid || ',' || ts || ',' || value, char(10)) "
         "|| char(10) AS report, count(*) AS anomalies FROM a")
_FLAG_OUTSIDE = "value < lo OR value > hi OR (k.bounds_normal = 0 AND (value = lo OR value = hi))"


def applies(instance: TaskInstance, program: str = "paste") -> bool:
    return True  # every instance, under every program: each covers both difficulties


def report_sql(params_text: str, hard: bool, start: str, end: str, bounds_normal: bool = True,
               program: str = "paste") -> str:
    if program not in PROGRAMS:
        raise ValueError(f"unknown anomaly_detection program {program!r} ({', '.join(PROGRAMS)})")
    if program == "flag":
        head = _values_head(json.loads(params_text), hard).removeprefix("WITH ")
        return (_FLAG.format(flag=int(bounds_normal)) + head
                + _TAIL.format(source="rs, k", start=start, end=end, outside=_FLAG_OUTSIDE))
    lo_op, hi_op = ("<", ">") if bounds_normal else ("<=", ">=")
    tail = _TAIL.format(source="rs", start=start, end=end, outside=f"value {lo_op} lo OR value {hi_op} hi")
    if program == "paste":
        return (_HARD if hard else _EASY).format(params=params_text.replace("'", "''")) + tail
    return _values_head(json.loads(params_text), hard) + tail


def _rows(rows: list[tuple[object, ...]]) -> str:
    """SQL VALUES rows, each value written as the parameter file shows it (strings quoted, numbers as JSON)."""
    def lit(v: object) -> str:
        return "'" + v.replace("'", "''") + "'" if isinstance(v, str) else json.dumps(v)
    return ", ".join("(" + ", ".join(lit(v) for v in row) + ")" for row in rows)


def _ranges(by_key: dict[str, dict[str, float]]) -> str:
    return _rows([(k, r["min"], r["max"]) for k, r in by_key.items()])


def _values_head(params: dict[str, Any], hard: bool) -> str:
    if not hard:
        return _EASY_VALUES.format(sensors=_ranges(params["sensors"]))
    return _HARD_VALUES.format(
        defaults=_ranges(params["defaults_by_kind"]), overrides=_ranges(params["overrides"]),
        maintenance=_rows([(m["sensor_id"], m["start"], m["end"]) for m in params["maintenance"]]))


def _last_result(history: Sequence[Step], name: str) -> str | None:
    for step in reversed(history):
        if step.call.name == name and not step.result.is_error:
            return step.result.content
    return None


def _report_cell(result: str) -> str | None:
    import json

    try:
        rows = json.loads(result)["rows"]
        return rows[0][0] if rows and rows[0][0] else None
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def next_action(env: AnomalyDetectionEnv, history: Sequence[Step],
                knows: frozenset[str] = ALL_KNOWN, program: str = "paste") -> ToolCall | FinalAnswer:
    if program in ("values", "flag") and _last_result(history, "describe_tables") is None:
        return ToolCall(name="describe_tables", arguments={})
    params = _last_result(history, "bucket_get")
    if params is None:
        return ToolCall(name="bucket_get", arguments={"key": PARAMS_KEY})
    if _last_result(history, "describe_tables") is None:
        return ToolCall(name="describe_tables", arguments={})
    window = _WINDOW.search(env.instance.instruction)
    report_key = _REPORT.search(env.instance.instruction)
    assert window and report_key, "anomaly_detection instruction without a window or report key"
    sql = report_sql(params, '"defaults_by_kind"' in params, window.group(1), window.group(2),
                     bounds_normal="bounds_are_normal" in knows, program=program)
    ran = [st for st in history if st.call.name == "sql_query" and st.call.arguments == {"sql": sql}]
    if not ran:
        return ToolCall(name="sql_query", arguments={"sql": sql})
    if ran[-1].result.is_error:
        return FinalAnswer(text="The anomaly query failed; no report uploaded.")
    result = ran[-1].result.content
    cell = _report_cell(result)
    if cell is None:
        return FinalAnswer(text="The query found no anomalies in the window; no report uploaded.")
    put = [st.call.arguments for st in history if st.call.name == "bucket_put" and not st.result.is_error
           and isinstance(st.call.arguments, dict) and st.call.arguments.get("key") == report_key.group(1)]
    if not put or put[-1].get("content") != cell:  # none yet, or another report was put last
        return ToolCall(name="bucket_put", arguments={"key": report_key.group(1), "content": cell})
    return FinalAnswer(text=f"Uploaded the anomaly report to {report_key.group(1)}.")
