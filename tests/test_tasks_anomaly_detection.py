"""anomaly_detection: oracle 1.0 / do-nothing < 1.0 everywhere, wrong reports rejected, the SQL tool is
read-only and bounded, malformed calls harmless, generation deterministic across processes, replay exact."""

from __future__ import annotations

import asyncio
import json
import math
import sqlite3
import subprocess
import sys

import pytest

import tasks
from tasks.anomaly_detection import AnomalyDetectionEnv
from tasks.anomaly_detection.data import PARAMS_KEY, ground_truth, ground_truth_from, range_of, readings
from tasks.anomaly_detection.oracle import anomaly_sql, report_csv
from tasks.records import ToolCall
from tasks_helpers import assert_replay_is_exact, reset_env, solve

FAMILY = "anomaly_detection"


def _env(index: int) -> AnomalyDetectionEnv:
    return reset_env(FAMILY, index, AnomalyDetectionEnv)


def test_generation_is_deterministic_across_processes() -> None:
    # instances and the warehouse rows built from them (a digest, to keep the pipe small)
    code = ("import hashlib, json, tasks; from tasks.anomaly_detection.data import AnomalyPayload, readings; "
            "insts = tasks.instances('anomaly_detection'); "
            "rows = [readings(AnomalyPayload.model_validate(i.payload)) for i in insts[:6]]; "
            "print(json.dumps([i.model_dump() for i in insts], sort_keys=True)); "
            "print(hashlib.sha256(json.dumps(rows).encode()).hexdigest())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    insts = tasks.instances(FAMILY)
    assert out[0] == json.dumps([i.model_dump() for i in insts], sort_keys=True)
    import hashlib

    from tasks.anomaly_detection.data import AnomalyPayload

    rows = [readings(AnomalyPayload.model_validate(i.payload)) for i in insts[:6]]
    assert out[1] == hashlib.sha256(json.dumps(rows).encode()).hexdigest()


@pytest.mark.parametrize("index", range(0, 100, 9))
async def test_oracle_sql_selects_exactly_the_ground_truth(index: int) -> None:
    env = _env(index)
    result = await env.call("sql_query", {"sql": anomaly_sql(env.payload)})
    assert not result.is_error, result.content
    body = json.loads(result.content)
    assert not body["truncated"]
    assert [tuple(r) for r in body["rows"]] == env.truth == ground_truth(env.payload)
    assert len(env.truth) >= 10
    env.close()


@pytest.mark.parametrize("index", [0, 1])
async def test_replay_reproduces_results_and_state(index: int) -> None:
    extra = [ToolCall(name="sql_query", arguments={"sql": sql}) for sql in (
        "DELETE FROM readings", "SELECT datetime(lower('NOW'))", "SELECT hex(zeroblob(1000000000))",
        "SELECT julianday(ts) - julianday('2024-01-01'), strftime('%H:%M', ts) FROM readings LIMIT 3")]
    await assert_replay_is_exact(FAMILY, index, AnomalyDetectionEnv, extra)


CLOCK_AND_ENTROPY = [
    "SELECT julianday()", "SELECT datetime()", "SELECT date()", "SELECT time()", "SELECT unixepoch()",
    "SELECT strftime('%s')", "SELECT datetime('now')", "SELECT date('NOW', '+1 day')", "SELECT julianday(' now ')",
    "SELECT current_timestamp", "SELECT CURRENT_DATE", "SELECT current_time", "SELECT datetime(lower('NOW'))",
    "SELECT datetime('n' || 'ow')", "SELECT datetime((SELECT 'now'))", "SELECT strftime('%s', replace('nxw', 'x', 'o'))",
    "SELECT COUNT(*) FROM readings WHERE ts < datetime(substr('xnow', 2))", "SELECT random()", "SELECT randomblob(8)",
    "SELECT abs(random()) % 10 FROM sensors", "SELECT * FROM readings ORDER BY random() LIMIT 1",
]


async def test_every_form_that_reads_the_clock_or_entropy_is_refused() -> None:
    env = _env(1)
    for sql in CLOCK_AND_ENTROPY:
        r = await env.call("sql_query", {"sql": sql})
        assert r.is_error, (sql, r.content)
        assert "wall clock is not available" in r.content or "is not available: it reads the clock" in r.content, (sql, r.content)
    assert env.queries == []  # refused queries leave no trace in the state
    env.close()


async def test_date_functions_over_data_give_sqlite_s_own_results() -> None:
    """Date functions over literals and columns stay allowed and return exactly what SQLite's builtins do."""
    env = _env(1)
    sql = ("SELECT ts, date(ts), time(ts), datetime(ts, '+90 minutes'), julianday(ts), unixepoch(ts), "
           "strftime('%Y-%W %H', ts), date('2024-02-29', '+1 year', 'start of month'), datetime(1700000000, 'unixepoch') "
           "FROM readings ORDER BY ts LIMIT 5")
    r = await env.call("sql_query", {"sql": sql})
    assert not r.is_error, r.content
    assert env._tmp is not None
    reference = sqlite3.connect(env._tmp / "warehouse.sqlite")  # the builtins, unwrapped
    try:
        expected = [list(row) for row in reference.execute(sql)]
    finally:
        reference.close()
    assert json.loads(r.content)["rows"] == expected
    env.close()


async def test_value_and_size_bombs_fail_fast_with_a_clear_message() -> None:
    env = _env(0)
    cases = {
        "SELECT hex(zeroblob(1000000000))": "longer than 1000000 bytes",
        "SELECT length(printf('%.*c', 1000000000, 'x'))": "width or precision over 1000000",
        "SELECT length(format('%2000000000d', 1))": "width or precision over 1000000",
        "SELECT length(replace(hex(zeroblob(400000)), '0', 'abcdefgh'))": "longer than 1000000 bytes",
        "SELECT group_concat(hex(zeroblob(1000))) FROM readings": "longer than 1000000 bytes",
        # a sort of big values: 35 s of temp files on the host before; now memory the sandbox caps
        ("WITH RECURSIVE r(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM r LIMIT 3000000) "
         "SELECT length(z) FROM (SELECT zeroblob(10000) z FROM r ORDER BY z) LIMIT 1"): "more memory than the SQL tool allows",
    }
    for sql, expected in cases.items():
        r = await env.call("sql_query", {"sql": sql})
        assert r.is_error and expected in r.content, (sql, r.content)
    wide = json.loads((await env.call("sql_query", {"sql": "SELECT printf('%.*c', 5000, 'x') AS v"})).content)
    assert wide["rows"][0][0].endswith("characters cut]") and len(wide["rows"][0][0]) < 2100  # cut, not dropped
    env.close()


SLOW_SQL = ("SELECT count(*) FROM readings a, (SELECT 1 FROM readings LIMIT 80) b "
            "WHERE instr(printf('%.*c', 500000, a.ts), 'y') = 0")


async def test_a_slow_query_does_not_stall_other_episodes_on_the_loop() -> None:
    """Two episodes on one event loop: one runs a query that would take about 30 s (a 500,000-character
    string built and scanned per row: few VM steps, so the step budget does not see it), the other runs the
    whole oracle. The oracle finishes while the slow query still runs; the slow query stops at its limit."""
    slow_env, other = _env(0), _env(2)
    order: list[str] = []

    async def slow() -> str:
        r = await slow_env.call("sql_query", {"sql": SLOW_SQL})
        order.append("slow")
        return r.content

    async def episode() -> float:
        await solve(other)
        order.append("other")
        return other.verify().score

    slow_content, score = await asyncio.gather(slow(), episode())
    assert score == 1.0
    assert order == ["other", "slow"]
    assert "time limit" in slow_content and "was stopped" in slow_content
    slow_env.close()
    other.close()


async def test_sql_tool_is_read_only_and_bounded() -> None:
    env = _env(1)
    count_sql = "SELECT COUNT(*) FROM readings"
    n_before = json.loads((await env.call("sql_query", {"sql": count_sql})).content)["rows"][0][0]
    rejected = [
        "DELETE FROM readings", "UPDATE readings SET value = 0", "INSERT INTO readings VALUES (1, 'x', 1.0)",
        "DROP TABLE readings", "CREATE TABLE t (x)", "PRAGMA writable_schema = 1", "ATTACH DATABASE ':memory:' AS m",
        "SELECT 1; DELETE FROM readings", "SELECT random()", "SELECT datetime('now')", "SELECT CURRENT_TIMESTAMP",
        "SELECT * FROM no_such_table", "SELEC 1",
    ]
    for sql in rejected:
        r = await env.call("sql_query", {"sql": sql})
        assert r.is_error, sql
    runaway = await env.call("sql_query", {"sql": "SELECT COUNT(*) FROM readings a, readings b, readings c"})
    assert runaway.is_error and "time budget" in runaway.content
    loop = await env.call("sql_query", {"sql": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
                                                "SELECT COUNT(*) FROM c"})
    assert loop.is_error and "time budget" in loop.content
    big = json.loads((await env.call("sql_query", {"sql": "SELECT * FROM readings"})).content)
    assert big["truncated"] and big["row_count"] <= 200 and "note" in big
    n_after = json.loads((await env.call("sql_query", {"sql": count_sql})).content)["rows"][0][0]
    assert n_after == n_before
    env.close()


async def test_malformed_calls_are_errors_without_state_change() -> None:
    env = _env(0)
    await env.call("bucket_get", {"key": PARAMS_KEY})
    await env.call("bucket_put", {"key": "reports/draft.csv", "content": "sensor_id,timestamp,value\n"})
    before = env.state()
    bad: list[tuple[str, object]] = [
        ("drop_database", {}),
        ("sql_query", "SELECT 1"),
        ("sql_query", "{\"sql\": "),
        ("sql_query", {}),
        ("sql_query", {"sql": "SELECT 1", "timeout": 5}),
        ("sql_query", {"sql": 7}),
        ("sql_query", {"sql": "SELECT 1 " + " " * 20_000}),
        ("bucket_put", {"key": "../outside.csv", "content": "x"}),
        ("bucket_put", {"key": "/etc/passwd", "content": "x"}),
        ("bucket_put", {"key": PARAMS_KEY, "content": "{}"}),
        ("bucket_put", {"key": "reports/big.csv", "content": "x" * 300_000}),
        ("bucket_put", {"key": "reports/x.csv"}),
        ("bucket_get", {"key": "reports/missing.csv"}),
        ("bucket_list", {"prefix": ["reports/"]}),
    ]
    for name, args in bad:
        result = await env.call(name, args)  # type: ignore[arg-type]
        assert result.is_error, (name, args, result.content)
        assert env.state() == before, (name, args)
    env.close()


async def test_oracle_recovers_from_a_student_state() -> None:
    env = _env(3)
    await env.call("bucket_put", {"key": env.payload.report_key, "content": "sensor,time\nX,1\n"})
    await env.call("sql_query", {"sql": "SELECT * FROM sensors"})
    await solve(env)
    assert env.verify().score == 1.0
    env.close()


def _verdict_for(env: AnomalyDetectionEnv, csv_text: str) -> list[str]:
    env.bucket.put(env.payload.report_key, csv_text)
    return env.verify().failed_checks


@pytest.mark.parametrize("index", range(12))
def test_verifier_rejects_plausible_wrong_answers(index: int) -> None:
    env = _env(index)
    p = env.payload
    truth = env.truth
    rows = readings(p)
    assert _verdict_for(env, report_csv(truth)) == []
    # 1. wrong column name
    assert "required_columns" in _verdict_for(env, report_csv(truth).replace("sensor_id", "sensor", 1))
    # 2. inclusive bounds: readings exactly at min/max reported as anomalies
    by_id = {s.id: s for s in p.sensors}
    at_bound = sorted({(s, t, v) for s, t, v in rows if p.window_start <= t < p.window_end
                       and v in (range_of(p, by_id[s]).min, range_of(p, by_id[s]).max)})
    assert len(at_bound) >= 4
    assert "precision" in _verdict_for(env, report_csv(sorted(truth + at_bound)))
    # 3. the window ignored: every out-of-range reading of the whole data set
    whole = p.model_copy(update={"window_start": p.start, "window_end": "9999-01-01T00:00:00Z"})
    assert "precision" in _verdict_for(env, report_csv(ground_truth_from(whole, rows)))
    # 4. missing rows (recall under 0.95)
    drop = max(3, math.ceil(0.06 * len(truth)))
    assert _verdict_for(env, report_csv(truth[drop:])) == ["recall"]
    # 5. timestamps shifted by the step (an off-by-one row)
    shifted = report_csv(truth).replace(":00Z", ":00+00:10")
    assert {"precision", "recall"} <= set(_verdict_for(env, shifted))
    if p.hard:
        # 6. overrides ignored, maintenance ignored, duplicates kept
        assert set(_verdict_for(env, report_csv(ground_truth_from(p.model_copy(update={"overrides": {}}), rows))))
        no_maint = ground_truth_from(p.model_copy(update={"maintenance": []}), rows)
        assert len(no_maint) > len(truth) and "precision" in _verdict_for(env, report_csv(no_maint))
        in_window = [r for r in rows if r in set(truth)]
        assert len(in_window) > len(truth) and "precision" in _verdict_for(env, report_csv(in_window))
    env.close()
