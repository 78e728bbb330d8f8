"""anomaly_detection: oracle 1.0 / do-nothing < 1.0 everywhere, wrong reports rejected, malformed calls
harmless, generation deterministic across processes, replay exact (the SQL tool's limits and refusals:
tests/security/test_sql_tool.py)."""

from __future__ import annotations

import json
import math
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
