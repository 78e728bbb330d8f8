"""Turns <-> rows of the per-turn Parquet table (polars, explicit schema).

One row per assistant turn, beside the trajectory table (`<name>.turns.parquet` next to `<name>.parquet`):
the turn table is where a trajectory's turns are stored, and its flat columns can be queried without
parsing JSON:

    turns = read_turn_frame("runs/r1/trajectories/evaluate/student")
    turns.filter(pl.col("finish_reason") == "length").group_by("trajectory_id").len()
    turns.select(pl.col("tool_names").explode().value_counts())

Prompt ids are stored by delta (`prompt_ids_reused` + `prompt_ids_added`, see agents/token_ids.py); read the
exact ids back with `Trajectory.token_ids()` after `read_trajectories`. Every `TurnRecord` field has a column
(a test keeps it so); only the assistant message, free-form JSON, stays a JSON string.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import polars as pl

from agents.records import Trajectory, TriggerRecord, TurnRecord
from harness.context import ContextCut
from tasks.records import ToolCall, ToolResult

TRIGGER = pl.Struct({"component_id": pl.String(), "turn": pl.Int32(), "kind": pl.String(), "detail": pl.String()})
TOOL_CALL = pl.Struct({"id": pl.String(), "name": pl.String(), "arguments": pl.String(), "raw": pl.Boolean()})
TOOL_RESULT = pl.Struct({"content": pl.String(), "is_error": pl.Boolean()})
CONTEXT_CUT = pl.Struct({"start": pl.Int32(), "end": pl.Int32(), "note": pl.String()})

TURN_SCHEMA: dict[str, pl.DataType] = {
    "schema_version": pl.Int32(),
    "trajectory_id": pl.String(),
    "turn": pl.Int32(),
    "stop": pl.String(),  # the trajectory's stop reason, on the turn that ended it (null on the others)
    "tool_names": pl.List(pl.String()),
    "n_tool_errors": pl.Int32(),
    "malformed_tool_calls": pl.Int32(),
    "finish_reason": pl.String(),
    "latency_s": pl.Float64(),
    "prompt_tokens": pl.Int64(),
    "completion_tokens": pl.Int64(),
    "cost_usd": pl.Float64(),
    "triggers": pl.List(TRIGGER),
    "tool_calls": pl.List(TOOL_CALL),
    "tool_results": pl.List(TOOL_RESULT),
    "prompt_ids_reused": pl.Int32(),
    "prompt_ids_added": pl.List(pl.Int32()),
    "prompt_ids_copy": pl.List(pl.Int32()),
    "completion_token_ids": pl.List(pl.Int32()),
    "logprobs": pl.List(pl.Float64()),
    "context_messages": pl.Int32(),
    "context_cut": CONTEXT_CUT,
    "assistant_json": pl.String(),
}
# TurnRecord field -> the column(s) that store it (the coverage test compares this with the record's fields)
STORED_FIELDS = {
    "index": "turn", "assistant": "assistant_json", "tool_calls": "tool_calls", "tool_results": "tool_results",
    "malformed_tool_calls": "malformed_tool_calls", "triggers": "triggers", "latency_s": "latency_s",
    "prompt_tokens": "prompt_tokens", "completion_tokens": "completion_tokens", "cost_usd": "cost_usd",
    "finish_reason": "finish_reason", "prompt_ids_reused": "prompt_ids_reused", "prompt_ids_added": "prompt_ids_added",
    "prompt_ids_copy": "prompt_ids_copy",
    "completion_token_ids": "completion_token_ids", "logprobs": "logprobs", "context_messages": "context_messages",
    "context_cut": "context_cut",
}


def turn_row(traj: Trajectory, t: TurnRecord, version: int) -> dict[str, Any]:
    last = t.index == len(traj.turns) - 1
    return {
        "schema_version": version, "trajectory_id": traj.id, "turn": t.index, "stop": traj.stop_reason if last else None,
        "tool_names": [c.name for c in t.tool_calls], "n_tool_errors": sum(r.is_error for r in t.tool_results),
        "malformed_tool_calls": t.malformed_tool_calls, "finish_reason": t.finish_reason, "latency_s": t.latency_s,
        "prompt_tokens": t.prompt_tokens, "completion_tokens": t.completion_tokens, "cost_usd": t.cost_usd,
        "triggers": [x.model_dump() for x in t.triggers],
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments if isinstance(c.arguments, str)
                        else json.dumps(c.arguments, ensure_ascii=False), "raw": isinstance(c.arguments, str)}
                       for c in t.tool_calls],
        "tool_results": [r.model_dump() for r in t.tool_results],
        "prompt_ids_reused": t.prompt_ids_reused, "prompt_ids_added": t.prompt_ids_added, "prompt_ids_copy": t.prompt_ids_copy,
        "completion_token_ids": t.completion_token_ids, "logprobs": t.logprobs,
        "context_messages": t.context_messages,
        "context_cut": t.context_cut.model_dump() if t.context_cut else None,
        "assistant_json": json.dumps(t.assistant, ensure_ascii=False),
    }


def turn_frame(trajectories: Iterable[Trajectory], version: int) -> pl.DataFrame:
    rows = [turn_row(traj, t, version) for traj in trajectories for t in traj.turns]
    return pl.DataFrame(rows, schema=TURN_SCHEMA)


def turn_from_row(r: dict[str, Any]) -> TurnRecord:
    return TurnRecord(
        index=r["turn"], assistant=json.loads(r["assistant_json"]),
        tool_calls=[ToolCall(id=c["id"], name=c["name"], arguments=c["arguments"] if c["raw"] else json.loads(c["arguments"]))
                    for c in r["tool_calls"]],
        tool_results=[ToolResult(**x) for x in r["tool_results"]],
        malformed_tool_calls=r["malformed_tool_calls"], triggers=[TriggerRecord(**x) for x in r["triggers"]],
        latency_s=r["latency_s"], prompt_tokens=r["prompt_tokens"], completion_tokens=r["completion_tokens"],
        cost_usd=r["cost_usd"], finish_reason=r["finish_reason"], prompt_ids_reused=r["prompt_ids_reused"],
        prompt_ids_added=r["prompt_ids_added"], prompt_ids_copy=r["prompt_ids_copy"], completion_token_ids=r["completion_token_ids"], logprobs=r["logprobs"],
        context_messages=r["context_messages"],
        context_cut=ContextCut(**r["context_cut"]) if r["context_cut"] is not None else None,
    )


def turns_by_trajectory(frame: pl.DataFrame) -> dict[str, list[TurnRecord]]:
    out: dict[str, list[TurnRecord]] = {}
    for r in frame.sort("trajectory_id", "turn", maintain_order=True).iter_rows(named=True):
        out.setdefault(r["trajectory_id"], []).append(turn_from_row(r))
    return out
