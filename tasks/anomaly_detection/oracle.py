"""anomaly_detection reference policy: read the parameters, look at the schema, run one SQL query that
selects exactly the anomalies, upload them as the report. State-based: it redoes only what is missing,
so it also finishes from a student's state (a wrong report is simply overwritten)."""

from __future__ import annotations

from collections.abc import Sequence

from tasks.anomaly_detection.data import PARAMS_KEY, REPORT_COLUMNS, AnomalyPayload, Reading, range_of
from tasks.anomaly_detection.env import AnomalyDetectionEnv
from tasks.anomaly_detection.verify import score_report
from tasks.records import FinalAnswer, Step, ToolCall


def anomaly_sql(p: AnomalyPayload) -> str:
    """The query a careful analyst writes from the parameter file (the oracle's visible reasoning)."""
    sid = "s.sensor_id" if p.hard else "r.sensor_id"
    source = "readings r JOIN sensors s ON s.sensor_pk = r.sensor_pk" if p.hard else "readings r"
    out_of_range = " OR ".join(
        f"({sid} = '{s.id}' AND (r.value < {range_of(p, s).min!r} OR r.value > {range_of(p, s).max!r}))"
        for s in p.sensors)
    sql = (f"SELECT DISTINCT {sid} AS sensor_id, r.ts AS timestamp, r.value AS value FROM {source} "
           f"WHERE r.ts >= '{p.window_start}' AND r.ts < '{p.window_end}' AND ({out_of_range})")
    if p.maintenance:
        excluded = " OR ".join(f"({sid} = '{m.sensor_id}' AND r.ts >= '{m.start}' AND r.ts < '{m.end}')"
                               for m in p.maintenance)
        sql += f" AND NOT ({excluded})"
    return sql + f" ORDER BY {sid}, r.ts"


def report_csv(truth: list[Reading]) -> str:
    lines = [",".join(REPORT_COLUMNS)] + [f"{sid},{ts},{v}" for sid, ts, v in truth]
    return "\n".join(lines) + "\n"


def next_action(env: AnomalyDetectionEnv, history: Sequence[Step]) -> ToolCall | FinalAnswer:
    p = env.payload
    if PARAMS_KEY not in env.objects_read:
        return ToolCall(name="bucket_get", arguments={"key": PARAMS_KEY})
    if not env.described:
        return ToolCall(name="describe_tables", arguments={})
    sql = anomaly_sql(p)
    if sql not in env.queries:
        return ToolCall(name="sql_query", arguments={"sql": sql})
    current = env.snapshot().report
    if current is None or not all(score_report(current, env.truth)[0].values()):
        return ToolCall(name="bucket_put", arguments={"key": p.report_key, "content": report_csv(env.truth)})
    return FinalAnswer(text=f"Uploaded {len(env.truth)} anomalies for [{p.window_start}, {p.window_end}) "
                            f"to {p.report_key}.")
