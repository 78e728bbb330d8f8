"""Red team, anomaly_detection's SQL tool (#12 §3-4): every form that reads the clock or entropy is refused
(replay must reproduce a state exactly) while date functions over data keep SQLite's own results; value and
size bombs fail fast with a clear message; a slow query stops at its limit without stalling other episodes;
the tool is read-only and bounded."""

from __future__ import annotations

import asyncio
import json
import sqlite3

from tasks.anomaly_detection import AnomalyDetectionEnv
from tasks_helpers import reset_env, solve

FAMILY = "anomaly_detection"


def _env(index: int) -> AnomalyDetectionEnv:
    return reset_env(FAMILY, index, AnomalyDetectionEnv)


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
