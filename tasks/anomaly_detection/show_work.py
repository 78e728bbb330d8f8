"""anomaly_detection, a show-your-work demonstration policy (for training the micro student; the pure oracle in
oracle.py is unchanged and stays the reference).

Every value it writes is derivable from what the trajectory shows, with as little copying as possible:
1. `bucket_get` the parameter file, 2. `describe_tables`, 3. ONE SQL program that is the same text for every
instance of a difficulty except for two kinds of contiguous copies: the parameter file pasted verbatim as a
string literal (apostrophes doubled, as SQL wants), read with SQLite's JSON functions, and the window bounds
from the instruction. The query computes the whole report as one CSV text cell. 4. `bucket_put` that cell
verbatim (a contiguous copy of the query result). It never reads the ground truth.

`knows` names the knowledge items (harness/evolution/cards/anomaly_detection.yaml) the policy applies; the
caller decides it (deploy/micro_policies.py). Without `bounds_are_normal` the query reports readings exactly at
a bound (`value <= lo OR value >= hi`), which the instances plant on purpose (two per sensor), so the report's
precision fails.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

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
ALL_KNOWN = frozenset({"bounds_are_normal"})
_TAIL = ("a AS (SELECT DISTINCT sid, ts, value FROM rs WHERE ts >= '{start}' AND ts < '{end}' "
         "AND (value {lo_op} lo OR value {hi_op} hi) ORDER BY sid, ts) "
         "SELECT 'sensor_id,timestamp,value' || char(10) || group_concat(sid || ',' || ts || ',' || value, char(10)) "
         "|| char(10) AS report, count(*) AS anomalies FROM a")


def applies(instance: TaskInstance) -> bool:
    return True  # every instance: the program covers both difficulties


def report_sql(params_text: str, hard: bool, start: str, end: str, bounds_normal: bool = True) -> str:
    head = _HARD if hard else _EASY
    lo_op, hi_op = ("<", ">") if bounds_normal else ("<=", ">=")
    return (head + _TAIL).format(params=params_text.replace("'", "''"), start=start, end=end, lo_op=lo_op,
                                 hi_op=hi_op)


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
                knows: frozenset[str] = ALL_KNOWN) -> ToolCall | FinalAnswer:
    params = _last_result(history, "bucket_get")
    if params is None:
        return ToolCall(name="bucket_get", arguments={"key": PARAMS_KEY})
    if _last_result(history, "describe_tables") is None:
        return ToolCall(name="describe_tables", arguments={})
    window = _WINDOW.search(env.instance.instruction)
    report_key = _REPORT.search(env.instance.instruction)
    assert window and report_key, "anomaly_detection instruction without a window or report key"
    sql = report_sql(params, '"defaults_by_kind"' in params, window.group(1), window.group(2),
                     bounds_normal="bounds_are_normal" in knows)
    ran = [st for st in history if st.call.name == "sql_query" and st.call.arguments.get("sql") == sql]
    if not ran:
        return ToolCall(name="sql_query", arguments={"sql": sql})
    if ran[-1].result.is_error:
        return FinalAnswer(text="The anomaly query failed; no report uploaded.")
    result = ran[-1].result.content
    cell = _report_cell(result)
    if cell is None:
        return FinalAnswer(text="The query found no anomalies in the window; no report uploaded.")
    if _last_result(history, "bucket_put") is None:
        return ToolCall(name="bucket_put", arguments={"key": report_key.group(1), "content": cell})
    return FinalAnswer(text=f"Uploaded the anomaly report to {report_key.group(1)}.")
