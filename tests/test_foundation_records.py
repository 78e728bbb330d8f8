"""Core records, config validation and the Parquet trajectory table."""

from __future__ import annotations

import pytest

from agents.records import ModelRole, TurnRecord, Trajectory, TriggerRecord
from agents.trajectory_table import TRAJECTORY_SCHEMA, read_frame, read_trajectories, write_trajectories
from flows.config import ConfigError, parse_config
from flows.store import RunStore, content_key
from tasks.records import TaskInstance, ToolCall, ToolResult, Verdict


def _trajectory(seed: int, score: float = 1.0) -> Trajectory:
    inst = TaskInstance(id="demo/3", family="demo", index=3, split="train", instruction="do it",
                        difficulty="easy", seed=11, payload={"rows": [1, 2]})
    turn = TurnRecord(
        index=0,
        assistant={"role": "assistant", "content": None, "tool_calls": [
            {"id": "c0", "type": "function", "function": {"name": "lookup", "arguments": "{\"q\": \"x\"}"}}]},
        tool_calls=[ToolCall(id="c0", name="lookup", arguments={"q": "x"})],
        tool_results=[ToolResult(content="found")],
        malformed_tool_calls=1,
        triggers=[TriggerRecord(component_id="hook:retry", turn=0, kind="hook")],
        latency_s=0.25, prompt_tokens=10, completion_tokens=5, cost_usd=0.001,
        prompt_token_ids=[1, 2, 3], completion_token_ids=[4, 5],
    )
    return Trajectory(
        instance=inst, harness_id="h0", model_id="hosted_vllm/tiny", seed=seed,
        messages=[{"role": "user", "content": "do it"}, turn.assistant, {"role": "tool", "tool_call_id": "c0", "content": "found"}],
        turns=[turn], stop_reason="submitted",
        verdict=Verdict(score=score, passed_checks=["a"], failed_checks=[] if score == 1 else ["b"]),
    ).with_id()


def test_parquet_round_trip_is_lossless(tmp_path):
    trajs = [_trajectory(0), _trajectory(1, 0.5)]
    path = write_trajectories(tmp_path / "t.parquet", trajs)
    back = read_trajectories(path)
    assert back == trajs
    frame = read_frame(tmp_path)
    assert dict(frame.schema) == TRAJECTORY_SCHEMA
    assert frame["passed"].to_list() == [True, False]
    assert frame["cost_usd"].to_list() == [0.001, 0.001]
    assert frame["n_malformed_tool_calls"].to_list() == [1, 1]
    assert not list(tmp_path.glob("*.tmp"))


def test_read_frame_rejects_foreign_schema(tmp_path):
    import polars as pl

    pl.DataFrame({"id": ["x"]}).write_parquet(tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="trajectory schema"):
        read_frame(tmp_path)


def test_trajectory_ids_are_job_keys():
    a, b = _trajectory(0), _trajectory(1)
    assert a.id and a.id != b.id
    assert _trajectory(0).id == a.id


def test_verdict_rejects_out_of_range_score():
    with pytest.raises(ValueError):
        Verdict(score=1.5)
    v = Verdict.from_checks({"rows": True, "total": False}, {"total": "expected 12, got 13"})
    assert v.score == 0.5 and v.failed_checks == ["total"] and "expected 12" in v.feedback


def test_model_role_needs_provider_prefix():
    with pytest.raises(ValueError, match="provider prefix"):
        ModelRole(model="tiny")
    assert ModelRole(model="hosted_vllm/tiny", api_base="http://x/v1").id == "hosted_vllm/tiny@http://x/v1"


GOOD = {
    "name": "t",
    "models": {"student": {"model": "hosted_vllm/tiny"}, "expert": {"model": "oracle/{family}"}},
    "evaluation": {"seeds": 3, "pairs": [{"model": "student"}, {"model": "expert"}]},
}


def test_config_accepts_good_config():
    cfg = parse_config(GOOD)
    assert cfg.evaluation.seeds == 3 and cfg.models["expert"].model == "oracle/{family}"


@pytest.mark.parametrize(
    ("patch", "key"),
    [
        ({"evalution": {}}, "evalution: unknown key"),
        ({"evaluation": {"seeds": -1}}, "evaluation.seeds"),
        ({"evaluation": {"pairs": [{"model": "judge"}]}}, "evaluation.pairs.0.model"),
        ({"families": ["no_such_family"]}, "families"),
        ({"models": {"student": {"model": "tiny"}}}, "models.student.model"),
        ({"models": {"student": {"model": "hosted_vllm/x", "temperature": "hot"}}}, "models.student.temperature"),
    ],
)
def test_config_errors_name_the_key(patch, key):
    with pytest.raises(ConfigError) as e:
        parse_config({**GOOD, **patch}, "cfg.yaml")
    assert key in str(e.value), str(e.value)
    assert str(e.value).startswith("cfg.yaml: ")


def test_run_store_layout_and_resume_state(tmp_path):
    store = RunStore(tmp_path, "r1")
    key = content_key({"cfg": 1}, "h0", "model", ["demo/3"], 0)
    assert not store.has("eval", key)
    store.write_trajectories("eval", key, [_trajectory(0)])
    store.mark_done("eval", key, {"n": 1})
    again = RunStore(tmp_path, "r1")  # a resumed run finds finished work
    assert again.has("eval", key) and again.done("eval") == {key: {"n": 1}}
    assert [t.id for t in again.read_trajectories("eval")] == [_trajectory(0).id]
    for sub in ("trajectories", "datasets", "adapters", "reports", "logs"):
        assert (tmp_path / "r1" / sub).is_dir()
