"""One trajectory <-> one row of the trajectory table (the turns go to the turn table, agents/turn_table.py)."""

from __future__ import annotations

import json
from typing import Any

import polars as pl

from agents.records import InjectedFault, Trajectory, TurnRecord
from tasks.records import TaskInstance, Verdict

TRAJECTORY_SCHEMA: dict[str, pl.DataType] = {
    "schema_version": pl.Int32(),
    "id": pl.String(),
    "instance_id": pl.String(),
    "family": pl.String(),
    "split": pl.String(),
    "difficulty": pl.String(),
    "harness_id": pl.String(),
    "model_id": pl.String(),
    "seed": pl.Int64(),
    "tag": pl.String(),
    "stop_reason": pl.String(),
    "score": pl.Float64(),
    "passed": pl.Boolean(),
    "n_turns": pl.Int64(),
    "n_tool_calls": pl.Int64(),
    "n_malformed_tool_calls": pl.Int64(),
    "prompt_tokens": pl.Int64(),
    "completion_tokens": pl.Int64(),
    "cost_usd": pl.Float64(),
    "wall_s": pl.Float64(),
    "error": pl.String(),
    "prefix_turns": pl.Int32(),
    "instance_json": pl.String(),
    "verdict_json": pl.String(),
    "messages_json": pl.String(),
    "tools_json": pl.String(),
    "injected_faults_json": pl.String(),  # simulation ground truth (flawed students); "[]" otherwise
}


def trajectory_row(t: Trajectory, version: int) -> dict[str, Any]:
    return {
        "schema_version": version,
        "id": t.id,
        "instance_id": t.instance.id,
        "family": t.instance.family,
        "split": t.instance.split,
        "difficulty": t.instance.difficulty,
        "harness_id": t.harness_id,
        "model_id": t.model_id,
        "seed": t.seed,
        "tag": t.tag,
        "stop_reason": t.stop_reason,
        "score": t.verdict.score,
        "passed": t.verdict.passed,
        "n_turns": len(t.turns),
        "n_tool_calls": sum(len(x.tool_calls) for x in t.turns),
        "n_malformed_tool_calls": sum(x.malformed_tool_calls for x in t.turns),
        "prompt_tokens": sum(x.prompt_tokens for x in t.turns),
        "completion_tokens": sum(x.completion_tokens for x in t.turns),
        "cost_usd": t.cost_usd,
        "wall_s": t.wall_s,
        "error": t.error,
        "prefix_turns": t.prefix_turns,
        "instance_json": t.instance.model_dump_json(),
        "verdict_json": t.verdict.model_dump_json(),
        "messages_json": json.dumps(t.messages, ensure_ascii=False),
        "tools_json": json.dumps(t.tools, ensure_ascii=False),
        "injected_faults_json": json.dumps([f.model_dump() for f in t.injected_faults]),
    }


def trajectory_from_row(r: dict[str, Any], turns: list[TurnRecord]) -> Trajectory:
    return Trajectory(
        id=r["id"], instance=TaskInstance.model_validate_json(r["instance_json"]), harness_id=r["harness_id"],
        model_id=r["model_id"], seed=r["seed"], messages=json.loads(r["messages_json"]), tools=json.loads(r["tools_json"]),
        turns=turns, stop_reason=r["stop_reason"], verdict=Verdict.model_validate_json(r["verdict_json"]), error=r["error"],
        wall_s=r["wall_s"], tag=r["tag"], prefix_turns=r["prefix_turns"],
        injected_faults=[InjectedFault(**f) for f in json.loads(r["injected_faults_json"])],
    )
