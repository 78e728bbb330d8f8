"""Trajectories <-> Parquet tables (polars, explicit schema).

One row per trajectory. Flat columns carry what tables and statistics filter on; the nested parts
(messages, turns, instance, verdict) are JSON strings so the schema stays fixed while records evolve.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import polars as pl

from agents.records import Trajectory

TRAJECTORY_SCHEMA: dict[str, pl.DataType] = {
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
    "record_json": pl.String(),  # the whole Trajectory, lossless
}


def to_row(t: Trajectory) -> dict[str, object]:
    return {
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
        "record_json": t.model_dump_json(),
    }


def to_frame(trajectories: Iterable[Trajectory]) -> pl.DataFrame:
    return pl.DataFrame([to_row(t) for t in trajectories], schema=TRAJECTORY_SCHEMA)


def write_trajectories(path: str | Path, trajectories: Iterable[Trajectory]) -> Path:
    """Atomic write: a reader never sees half a file, a crash never leaves one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    to_frame(trajectories).write_parquet(tmp)
    os.replace(tmp, path)
    return path


def read_frame(path: str | Path) -> pl.DataFrame:
    """All trajectory rows under `path` (a file, or a directory of .parquet files), schema-checked."""
    path = Path(path)
    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    if not files:
        return pl.DataFrame(schema=TRAJECTORY_SCHEMA)
    frames = [pl.read_parquet(f) for f in files]
    for f, df in zip(files, frames, strict=True):
        if dict(df.schema) != TRAJECTORY_SCHEMA:
            raise ValueError(f"{f} does not have the trajectory schema: {dict(df.schema)}")
    return pl.concat(frames)


def read_trajectories(path: str | Path) -> list[Trajectory]:
    return [Trajectory.model_validate_json(s) for s in read_frame(path)["record_json"].to_list()]


def summary(frame: pl.DataFrame) -> pl.DataFrame:
    """Success rate per family (mean score and pass rate) for quick CLI printing."""
    return (
        frame.group_by("family")
        .agg(
            pl.len().alias("n"),
            pl.col("passed").mean().alias("success_rate"),
            pl.col("score").mean().alias("mean_score"),
        )
        .sort("family")
    )

