"""Core records, config validation, the Parquet trajectory and turn tables, token ids by delta, run storage."""

from __future__ import annotations

import json

import polars as pl
import pytest

from agents.records import STOP_REASON_MEANINGS, STOP_REASONS, InjectedFault, ModelRole, Trajectory, TriggerRecord, TurnRecord
from agents.token_ids import encode_prompt, next_base
from agents.tables.rows import TRAJECTORY_SCHEMA
from agents.tables.trajectories import read_frame, read_trajectories, read_turn_frame, turns_path, write_trajectories
from agents.tables.turns import STORED_FIELDS, TURN_SCHEMA
from flows.config import ConfigError, parse_config
from flows.store import RunStore, content_key
from harness import baseline
from harness.context import ContextCut
from tasks.records import TaskInstance, ToolCall, ToolResult, Verdict

INSTANCE = TaskInstance(id="demo/3", family="demo", index=3, split="train", instruction="do it", difficulty="easy",
                        seed=11, payload={"rows": [1, 2]})


def _turn(i: int, prompt: list[int] | None, base: list[int], **kw) -> TurnRecord:
    """A turn with the given full prompt ids, stored by delta against `base` (previous prompt + completion)."""
    reused, added, copy = (0, None, None) if prompt is None else encode_prompt(base, prompt)
    call = ToolCall(id=f"c{i}", name="lookup", arguments={"q": "x", "n": 1.5} if i % 2 == 0 else '{"q": ')
    return TurnRecord(
        index=i, assistant={"role": "assistant", "content": None, "tool_calls": [
            {"id": call.id, "type": "function", "function": {"name": "lookup", "arguments": call.arguments_json()}}]},
        tool_calls=[call], tool_results=[ToolResult(content=f"found {i} ü", is_error=i % 2 == 1)],
        malformed_tool_calls=i % 2, triggers=[TriggerRecord(component_id="hook:retry", turn=i, kind="hook", detail="d")],
        latency_s=0.25, prompt_tokens=len(prompt or []), completion_tokens=2, cost_usd=0.001, finish_reason="tool_calls",
        prompt_ids_reused=reused, prompt_ids_added=added, prompt_ids_copy=copy, **kw)


def _trajectory(seed: int, score: float = 1.0, prompts: list[list[int] | None] | None = None) -> Trajectory:
    """Turns whose full prompt ids are `prompts` (default: each extends the last prompt + completion)."""
    prompts = prompts if prompts is not None else [[1, 2, 3], [1, 2, 3, 40, 41, 7, 8], [1, 2, 3, 40, 41, 7, 8, 50, 51, 9]]
    turns, base, messages = [], [], [{"role": "user", "content": "do it"}]
    for i, prompt in enumerate(prompts):
        completion = None if prompt is None else [40 + 10 * i, 41 + 10 * i]
        turns.append(_turn(i, prompt, base, completion_token_ids=completion,
                           logprobs=None if prompt is None else [-0.125, -2.5e-07],
                           context_messages=len(messages), context_cut=ContextCut(start=1, end=2, note="n") if i == 2 else None))
        base = next_base(prompt, completion)
        messages += [turns[-1].assistant, {"role": "tool", "tool_call_id": f"c{i}", "name": "lookup", "content": f"found {i} ü"}]
    return Trajectory(
        instance=INSTANCE, harness_id="h0", model_id="hosted_vllm/tiny", seed=seed, messages=messages,
        tools=[{"type": "function", "function": {"name": "lookup", "parameters": {}}}], turns=turns,
        stop_reason="submitted", verdict=Verdict(score=score, passed_checks=["a"], failed_checks=[] if score == 1 else ["b"]),
        injected_faults=[InjectedFault(turn=1, category="tool_use", kind="mistyped_argument")] if seed == 1 else [],
    ).with_id()


def test_parquet_round_trip_is_lossless(tmp_path):
    trajs = [_trajectory(0), _trajectory(1, 0.5), _trajectory(2, prompts=[])]
    path = write_trajectories(tmp_path / "t.parquet", trajs)
    assert turns_path(path).exists() and not list(tmp_path.glob("*.tmp"))
    back = read_trajectories(path)
    assert back == trajs and back[1].injected_faults and back[1].view().injected_faults == []
    frame = read_frame(path)
    assert dict(frame.schema) == TRAJECTORY_SCHEMA and frame.height == 3
    assert read_frame(tmp_path).height == 3  # a directory: the turn tables beside are not trajectory files
    assert frame["passed"].to_list() == [True, False, True]
    assert frame["n_malformed_tool_calls"].to_list() == [1, 1, 0]
    assert frame["schema_version"].to_list() == [2, 2, 2]
    # messages do not repeat the turn table: replies and recorded tool results are references
    packed = json.loads(frame["messages_json"][0])
    assert packed[1:3] == [{"$ref": "assistant"}, {"$ref": "tool", "id": "c0"}] and frame["messages_packed"].all()
    odd = trajs[0].model_copy(update={"messages": [*trajs[0].messages, {"role": "user", "content": "x", "$ref": 1}]})
    assert read_trajectories(write_trajectories(tmp_path / "odd.parquet", [odd])) == [odd]


def test_turn_table_is_queryable_without_json(tmp_path):
    write_trajectories(tmp_path / "t.parquet", [_trajectory(0), _trajectory(1, 0.5)])
    turns = read_turn_frame(tmp_path)
    assert dict(turns.schema) == TURN_SCHEMA and turns.height == 6
    errors = turns.filter(pl.col("n_tool_errors") > 0).select("trajectory_id", "turn").rows()
    assert sorted(t for _, t in errors) == [1, 1]
    assert turns.select(pl.col("tool_names").explode().value_counts()).item()["count"] == 6
    fired = turns.select(pl.col("triggers").list.eval(pl.element().struct.field("component_id")).explode())
    assert set(fired.to_series()) == {"hook:retry"}
    assert turns.filter(pl.col("stop").is_not_null())["turn"].to_list() == [2, 2]


def test_turn_table_stores_every_turn_field():
    # a field added to TurnRecord must get a column (or it would be lost on write)
    assert set(STORED_FIELDS) == set(TurnRecord.model_fields)
    assert set(STORED_FIELDS.values()) <= set(TURN_SCHEMA)


def test_prompt_ids_by_delta_round_trip_with_and_without_rewrites(tmp_path):
    extending = [[1, 2, 3], [1, 2, 3, 40, 41, 7, 8], [1, 2, 3, 40, 41, 7, 8, 50, 51, 9]]
    rewritten = [[1, 2, 3], [1, 2, 99, 7], None, [5, 6], [5, 6, 70, 71, 1]]  # a window cut, a turn without ids, a new start
    for prompts in (extending, rewritten):
        traj = _trajectory(0, prompts=prompts)
        [back] = read_trajectories(write_trajectories(tmp_path / "x.parquet", [traj]))
        full = [None if p is None else (p, [40 + 10 * i, 41 + 10 * i]) for i, p in enumerate(prompts)]
        assert back.token_ids() == full
        assert [back.prompt_token_ids(i) for i in range(len(prompts))] == prompts
    ext = _trajectory(0, prompts=extending)
    assert [len(t.prompt_ids_added) for t in ext.turns] == [3, 2, 1]  # only what each turn appended
    rew = _trajectory(0, prompts=rewritten)
    assert [(t.prompt_ids_reused, t.prompt_ids_added) for t in rew.turns] == [
        (0, [1, 2, 3]), (2, [99, 7]), (0, None), (0, [5, 6]), (4, [1])]


def test_a_window_that_keeps_later_turns_is_stored_as_one_copied_run(tmp_path):
    """Prompts of a keep-last-2 window: head + note + the last two turns. Each prompt drops the oldest turn of the
    previous one, so the kept turns are one run of the previous prompt + completion; only the head's new note
    and the new turn are stored."""
    import random

    rng = random.Random(0)
    head = [rng.randrange(1000) for _ in range(300)]
    turns_ids = [[rng.randrange(1000) for _ in range(150)] for _ in range(8)]  # each turn as the template renders it
    prompts = [head + [900 + i] + [x for t in turns_ids[max(0, i - 2):i] for x in t] for i in range(8)]
    traj = _trajectory(0, prompts=prompts)
    assert [back for back in read_trajectories(write_trajectories(tmp_path / "w.parquet", [traj]))][0].token_ids() == \
        traj.token_ids() and [p for p, _ in traj.token_ids()] == prompts
    copied = [t.prompt_ids_copy for t in traj.turns]
    assert all(c is not None and c[2] >= 150 for c in copied[3:])  # from turn 3 on, a whole kept turn is copied
    assert sum(len(t.prompt_ids_added) for t in traj.turns) < sum(map(len, prompts)) / 3


def test_schema_version_1_is_converted_and_unknown_versions_fail_in_one_line(tmp_path):
    traj = _trajectory(0)
    data = json.loads(traj.model_dump_json())
    for t, (prompt, _) in zip(data["turns"], traj.token_ids(), strict=True):  # the version-1 turn: full prompt ids
        del t["prompt_ids_reused"], t["prompt_ids_added"], t["finish_reason"], t["logprobs"], t["context_messages"], t["context_cut"]
        t["prompt_token_ids"] = prompt
    del data["prefix_turns"]
    data.update(stop_reason="error", error="stopped by hook 'halt': no adding")
    pl.DataFrame({"id": [traj.id], "score": [1.0], "record_json": [json.dumps(data)]}).write_parquet(tmp_path / "old.parquet")
    [back] = read_trajectories(tmp_path / "old.parquet")
    assert back.token_ids() == traj.token_ids() and [t.prompt_ids_added for t in back.turns] == [[1, 2, 3], [7, 8], [9]]
    assert back.stop_reason == "harness_stop" and read_frame(tmp_path)["schema_version"].to_list() == [2]
    assert read_turn_frame(tmp_path).height == 3

    frame = read_frame(tmp_path).with_columns(pl.lit(99, dtype=pl.Int32).alias("schema_version"))
    frame.write_parquet(tmp_path / "new.parquet")
    with pytest.raises(ValueError) as e:
        read_frame(tmp_path / "new.parquet")
    assert str(e.value) == f"{tmp_path / 'new.parquet'}: trajectory table schema_version [99]; this code reads 2 (and converts 1)"


def test_read_frame_rejects_foreign_schema(tmp_path):
    pl.DataFrame({"id": ["x"]}).write_parquet(tmp_path / "bad.parquet")
    with pytest.raises(ValueError, match="trajectory schema"):
        read_frame(tmp_path)


def test_stop_reasons_are_listed_once_with_their_meaning():
    assert list(STOP_REASON_MEANINGS) == list(STOP_REASONS)
    assert {"harness_stop", "truncated", "replay_divergence"} <= set(STOP_REASONS)


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
    h = baseline("stock_alert")
    traj = _trajectory(0).model_copy(update={"harness_id": h.id}).with_id()
    key = content_key({"cfg": 1}, h.id, "model", ["demo/3"], 0)
    assert not store.has("eval", key)
    with pytest.raises(ValueError, match=f"no harness {h.id}"):
        store.write_trajectories("eval", key, [traj], harnesses=[])
    assert not store.has("eval", key)
    store.write_trajectories("eval", key, [traj], harnesses=[h, h])
    store.mark_done("eval", key, {"n": 1})
    again = RunStore(tmp_path, "r1")  # a resumed run finds finished work
    assert again.has("eval", key) and again.done("eval") == {key: {"n": 1}}
    [back] = again.read_trajectories("eval")
    assert back == traj and again.load_harness(back.harness_id) == h
    assert again.turn_frame("eval")["trajectory_id"].to_list() == [traj.id] * 3
    assert [p.name for p in (tmp_path / "r1" / "harnesses").iterdir()] == [f"{h.id}.yaml"]
    with pytest.raises(FileNotFoundError, match="no harness 0000"):
        again.load_harness("0000")
    for sub in ("trajectories", "harnesses", "datasets", "adapters", "reports", "logs"):
        assert (tmp_path / "r1" / sub).is_dir()
