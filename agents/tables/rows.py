"""One trajectory <-> one row of the trajectory table (the turns go to the turn table, agents/tables/turns.py).

`messages_json` does not repeat what the turn table holds: an assistant message equal to its turn's record
is stored as `{"$ref": "assistant"}`, and a tool message whose content is the recorded result of its call
as `{"$ref": "tool", "id": <tool_call_id>}` (a truncated result, a blocked call or an injected message stays
as it is). `unpack_messages` restores the exact list. A conversation that itself uses the key "$ref" is
stored unpacked (`messages_packed` = false).
"""

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
    "messages_packed": pl.Boolean(),
    "tools_json": pl.String(),
    "injected_faults_json": pl.String(),  # simulation ground truth (flawed students); "[]" otherwise
}


def trajectory_row(t: Trajectory, version: int) -> dict[str, Any]:
    packed = pack_messages(t.messages, t.turns)
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
        "messages_json": json.dumps(packed if packed is not None else t.messages, ensure_ascii=False),
        "messages_packed": packed is not None,
        "tools_json": json.dumps(t.tools, ensure_ascii=False),
        "injected_faults_json": json.dumps([f.model_dump() for f in t.injected_faults]),
    }


def trajectory_from_row(r: dict[str, Any], turns: list[TurnRecord]) -> Trajectory:
    messages = json.loads(r["messages_json"])
    return Trajectory(
        id=r["id"], instance=TaskInstance.model_validate_json(r["instance_json"]), harness_id=r["harness_id"],
        model_id=r["model_id"], seed=r["seed"], tools=json.loads(r["tools_json"]),
        messages=unpack_messages(messages, turns) if r["messages_packed"] else messages,
        turns=turns, stop_reason=r["stop_reason"], verdict=Verdict.model_validate_json(r["verdict_json"]), error=r["error"],
        wall_s=r["wall_s"], tag=r["tag"], prefix_turns=r["prefix_turns"],
        injected_faults=[InjectedFault(**f) for f in json.loads(r["injected_faults_json"])],
    )


_TOOL_KEYS = {"role", "tool_call_id", "name", "content"}


def pack_messages(messages: list[dict[str, Any]], turns: list[TurnRecord]) -> list[dict[str, Any]] | None:
    """The messages with what the turns hold replaced by references (None: not packable, store as is)."""
    if any("$ref" in m for m in messages):
        return None
    out: list[dict[str, Any]] = []
    k = -1
    for m in messages:
        if m.get("role") == "assistant":
            k += 1
            out.append({"$ref": "assistant"} if k < len(turns) and m == turns[k].assistant else m)
        elif m.get("role") == "tool" and set(m) == _TOOL_KEYS and m["content"] == _recorded(turns, k, m):
            out.append({"$ref": "tool", "id": m["tool_call_id"]})
        else:
            out.append(m)
    return out


def _recorded(turns: list[TurnRecord], k: int, m: dict[str, Any]) -> str | None:
    """The recorded result of the call `m` answers in turn k (None unless exactly one call of that id and name)."""
    if not 0 <= k < len(turns):
        return None
    t = turns[k]
    hits = [r for c, r in zip(t.tool_calls, t.tool_results, strict=False) if c.id == m["tool_call_id"]]
    names = [c.name for c in t.tool_calls if c.id == m["tool_call_id"]]
    return hits[0].content if len(hits) == 1 and len(names) == 1 and names[0] == m["name"] else None


def unpack_messages(packed: list[dict[str, Any]], turns: list[TurnRecord]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    k = -1
    for m in packed:
        ref = m.get("$ref")
        if ref == "assistant" or m.get("role") == "assistant":
            k += 1
        if ref == "assistant":
            out.append(turns[k].assistant)
        elif ref == "tool":
            t = turns[k]
            i = next(i for i, c in enumerate(t.tool_calls) if c.id == m["id"])
            out.append({"role": "tool", "tool_call_id": m["id"], "name": t.tool_calls[i].name,
                        "content": t.tool_results[i].content})
        else:
            out.append(m)
    return out
