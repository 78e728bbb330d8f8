"""anomaly_detection faults: a skipped or forgotten sensor, the anomaly conventions, the report's format.

A belief changes the parameters the student's SQL is written from (`anomaly_sql` of the believed payload)
and the anomalies it reports (the believed ground truth over the warehouse's real rows).
Knowledge keys (harness/evolution/cards/anomaly_detection.yaml): bounds_are_normal,
window_start_inclusive_end_exclusive, override_replaces_default, maintenance_not_anomalous,
deduplicate_readings, join_sensor_codes, report_csv_header.
"""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

import tasks
from agents.flawed.menu import Action, Belief, FamilyMenu, NotApplicable, Slip, call_of, with_args
from agents.flawed.views import set_payload
from tasks.anomaly_detection.data import (
    PARAMS_KEY,
    AnomalyPayload,
    Range,
    Reading,
    ground_truth_from,
    iso,
    parse_iso,
    readings,
)
from tasks.records import ToolCall


@functools.lru_cache(maxsize=32)
def _rows(instance_id: str) -> tuple[Reading, ...]:
    """The warehouse's rows (duplicates included), rebuilt from the instance (a few thousand tuples)."""
    return tuple(readings(AnomalyPayload.model_validate(tasks.instance(instance_id).payload)))


def _believe(view: Any, **changes: Any) -> None:
    """Change the believed parameters and recompute the believed anomalies from them."""
    set_payload(view, **changes)
    p: AnomalyPayload = view.payload
    known = {s.id for s in p.sensors}
    view.truth = ground_truth_from(p, [r for r in _rows(view.instance.id) if r[0] in known])


def _shrink(r: Range) -> Range:
    return Range(min=round(r.min + 0.001, 3), max=round(r.max - 0.001, 3))


def _inclusive_bounds(view: Any, unit: str) -> None:
    p: AnomalyPayload = view.payload
    _believe(view, ranges={k: _shrink(r) for k, r in p.ranges.items()},
             overrides={k: _shrink(r) for k, r in p.overrides.items()})


def _inclusive_end(view: Any, unit: str) -> None:
    p: AnomalyPayload = view.payload
    _believe(view, window_end=iso(parse_iso(p.window_end) + timedelta(seconds=p.step_s)))


def _hard(env: Any) -> list[str]:
    return [""] if env.payload.hard else []


def _with_duplicates(view: Any, unit: str) -> None:
    truth = set(view.truth)
    view.truth = sorted(r for r in _rows(view.instance.id) if r in truth)


def _pk_ids(view: Any, unit: str) -> None:
    pk = {s.id: str(s.pk) for s in view.payload.sensors}
    view.truth = [(pk[sid], ts, v) for sid, ts, v in view.truth]


def _last_sensor(env: Any) -> list[str]:
    return [env.payload.sensors[-1].id]  # one query covers every sensor: one unit to leave out


def _first_sensor(env: Any) -> list[str]:
    return [env.payload.sensors[0].id]


def _drop_sensor(view: Any, unit: str) -> None:
    _believe(view, sensors=[s for s in view.payload.sensors if s.id != unit])


def _report_header(env: Any, action: Action) -> Action:
    call = call_of(action, "bucket_put")
    head, sep, rest = call.arguments["content"].partition("\n")
    if head != "sensor_id,timestamp,value":
        raise NotApplicable("not the report")
    return with_args(call, content="sensor,time,reading" + sep + rest)


def _wrong_key(env: Any, action: Action) -> Action:
    call = call_of(action, "bucket_put")
    if call.arguments["key"] != env.payload.report_key:
        raise NotApplicable("not the report upload")
    return with_args(call, key="reports/anomalies.csv" if call.arguments["key"] != "reports/anomalies.csv"
                     else "reports/anomaly_report.csv")


MENU = FamilyMenu(
    family="anomaly_detection",
    beliefs=(
        Belief("skip_sensor", "planning", _last_sensor, _drop_sensor,
               "leaves sensor {unit} out of its query and report", cues=("sensor", "every")),
        Belief("forget_sensor", "long_context", _first_sensor, _drop_sensor,
               "forgets sensor {unit} from the parameters it read (re-queries without it, reports without it)",
               cues=("sensor", "every"), retrieved=lambda env, history, u: PARAMS_KEY in env.objects_read),
        Belief("inclusive_bounds", "implicit_knowledge", lambda env: [""], _inclusive_bounds,
               "counts a value exactly at a bound as anomalous", key="bounds_are_normal", cues=("bound",)),
        Belief("inclusive_window_end", "implicit_knowledge", lambda env: [""], _inclusive_end,
               "includes readings at the window's exclusive end", key="window_start_inclusive_end_exclusive",
               cues=("window", "exclusive")),
        Belief("ignore_overrides", "implicit_knowledge", _hard, lambda v, u: _believe(v, overrides={}),
               "uses each kind's default range and ignores per-sensor overrides", key="override_replaces_default",
               cues=("override",)),
        Belief("maintenance_counted", "implicit_knowledge", _hard, lambda v, u: _believe(v, maintenance=[]),
               "reports readings inside maintenance windows", key="maintenance_not_anomalous",
               cues=("maintenance",)),
        Belief("keep_duplicates", "implicit_knowledge", _hard, _with_duplicates,
               "reports duplicated readings (ingestion retries) once per row", key="deduplicate_readings",
               cues=("duplicate", "distinct")),
        Belief("pk_as_sensor_id", "implicit_knowledge", _hard, _pk_ids,
               "reports the integer sensor key instead of the sensor code", key="join_sensor_codes",
               cues=("join", "sensor code", "sensor_pk")),
    ),
    slips=(
        Slip("report_header", "instruction_following", _report_header, "uploaded the report with another header",
             key="report_csv_header", cues=("header", "column")),
        Slip("wrong_report_key", "instruction_following", _wrong_key, "uploaded the report under another key",
             cues=("key", "report")),
    ),
    adjacent={
        "bucket_put": lambda c: ToolCall(name="bucket_get", arguments={"key": c.arguments["key"]}),
        "sql_query": lambda c: ToolCall(name="describe_tables", arguments={}),
        "bucket_get": lambda c: ToolCall(name="bucket_list", arguments={"prefix": c.arguments["key"]}),
    },
    read_tools=frozenset({"describe_tables", "sql_query", "bucket_list", "bucket_get"}),
    write_tools=frozenset({"bucket_put"}),
    not_applicable={
        "implicit_knowledge": "ignore_overrides, maintenance_counted, keep_duplicates and pk_as_sensor_id only "
                              "on hard instances",
        "planning": "skip_write has one write to skip (the upload); skip_sensor stands for a skipped subtask",
    },
)
