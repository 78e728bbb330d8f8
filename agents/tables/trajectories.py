"""Trajectories <-> Parquet tables (polars, explicit schemas), with a schema version.

A file `<name>.parquet` holds one row per trajectory; `<name>.turns.parquet` beside it holds one row per
turn (agents/tables/turns.py). Flat columns carry what tables and statistics filter on; the nested parts that
have no fixed shape (instance, verdict, messages, tool schemas) are JSON strings. Together the two files are
lossless: `read_trajectories(write_trajectories(p, ts)) == ts`.

Versions (`SCHEMA_VERSION`, a column of both tables):
- 1: one table, the whole `Trajectory` as `record_json`, every turn's full prompt ids. Converted on read.
- 2: the trajectory and turn tables, prompt ids by delta, per-turn finish reason, logprobs and context cut.
A file of any other version fails with one line naming the file and the versions.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import polars as pl

from agents.records import Trajectory
from agents.tables.migrations import from_v1
from agents.tables.turns import TURN_SCHEMA, turn_frame, turns_by_trajectory
from agents.tables.rows import TRAJECTORY_SCHEMA, trajectory_from_row, trajectory_row

SCHEMA_VERSION = 2
TURNS_SUFFIX = ".turns.parquet"


def turns_path(path: str | Path) -> Path:
    """The turn table beside a trajectory table: `x.parquet` -> `x.turns.parquet`."""
    path = Path(path)
    return path.with_name(path.name.removesuffix(".parquet") + TURNS_SUFFIX)


def generated_turn_usage(files: list[Path]) -> pl.LazyFrame:
    """(trajectory_id, calls, model_s) of the trajectories stored in these files (each with its turn table): how
    many turns the model generated (those after a replayed prefix) and the sum of their call latencies."""
    heads = pl.scan_parquet(files).select(pl.col("id").alias("trajectory_id"), pl.col("prefix_turns").fill_null(0))
    turns = pl.scan_parquet([turns_path(p) for p in files]).select("trajectory_id", "turn", "latency_s")
    return (turns.join(heads, on="trajectory_id").filter(pl.col("turn") >= pl.col("prefix_turns"))
            .group_by("trajectory_id").agg(pl.len().alias("calls"), pl.col("latency_s").sum().alias("model_s")))


def to_frame(trajectories: Iterable[Trajectory]) -> pl.DataFrame:
    return pl.DataFrame([trajectory_row(t, SCHEMA_VERSION) for t in trajectories], schema=TRAJECTORY_SCHEMA)


def to_turn_frame(trajectories: Iterable[Trajectory]) -> pl.DataFrame:
    return turn_frame(trajectories, SCHEMA_VERSION)


def _atomic_parquet(frame: pl.DataFrame, path: Path) -> None:
    tmp = path.with_name(path.name + ".tmp")
    frame.write_parquet(tmp)
    os.replace(tmp, path)


def write_trajectories(path: str | Path, trajectories: Iterable[Trajectory]) -> Path:
    """Write the trajectory table at `path` and its turn table beside it, each atomically (turns first, so a
    trajectory file never exists without its turns). Trajectory ids must be unique within a file."""
    path = Path(path)
    trajs = list(trajectories)
    ids = [t.id for t in trajs]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise ValueError(f"{path}: trajectory ids must be unique within a file; repeated: {', '.join(dup[:5])}")
    path.parent.mkdir(parents=True, exist_ok=True)
    _atomic_parquet(to_turn_frame(trajs), turns_path(path))
    _atomic_parquet(to_frame(trajs), path)
    return path


def _files(path: Path) -> list[Path]:
    if not path.is_dir():
        return [path]
    return sorted(p for p in path.rglob("*.parquet") if not p.name.endswith(TURNS_SUFFIX))


def _version(path: Path, frame: pl.DataFrame) -> int:
    if "schema_version" not in frame.columns:
        if "record_json" in frame.columns:
            return 1
        raise ValueError(f"{path} does not have the trajectory schema (no schema_version column): {dict(frame.schema)}")
    versions = set(frame["schema_version"].unique().to_list()) or {SCHEMA_VERSION}
    if versions != {SCHEMA_VERSION}:
        raise ValueError(f"{path}: trajectory table schema_version {sorted(versions)}; this code reads {SCHEMA_VERSION} "
                         "(and converts 1)")
    return SCHEMA_VERSION


def _check_schema(path: Path, frame: pl.DataFrame, schema: dict[str, pl.DataType], what: str) -> None:
    if dict(frame.schema) != schema:
        raise ValueError(f"{path} does not have the {what} schema of version {SCHEMA_VERSION}: {dict(frame.schema)}")


def load_file(path: Path) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(trajectory frame, turn frame) of one trajectory file, converted to the current version."""
    frame = pl.read_parquet(path)
    if _version(path, frame) == 1:
        trajs = [from_v1(s) for s in frame["record_json"].to_list()]
        return to_frame(trajs), to_turn_frame(trajs)
    _check_schema(path, frame, TRAJECTORY_SCHEMA, "trajectory")
    tpath = turns_path(path)
    if not tpath.exists():
        raise ValueError(f"{path}: its turn table {tpath.name} is missing")
    turns = pl.read_parquet(tpath)
    _check_schema(tpath, turns, TURN_SCHEMA, "turn")
    return frame, turns


def read_frame(path: str | Path) -> pl.DataFrame:
    """All trajectory rows under `path` (a file, or a directory of .parquet files), schema-checked."""
    files = _files(Path(path))
    if not files:
        return pl.DataFrame(schema=TRAJECTORY_SCHEMA)
    frames = []
    for f in files:
        frame = pl.read_parquet(f)
        if _version(f, frame) == 1:
            frame = load_file(f)[0]
        _check_schema(f, frame, TRAJECTORY_SCHEMA, "trajectory")
        frames.append(frame)
    return pl.concat(frames)


def read_turn_frame(path: str | Path) -> pl.DataFrame:
    """All turn rows under `path` (trajectory files given as for `read_frame`; their turn tables are read)."""
    frames = [load_file(f)[1] for f in _files(Path(path))]
    return pl.concat(frames) if frames else pl.DataFrame(schema=TURN_SCHEMA)


def read_trajectories(path: str | Path) -> list[Trajectory]:
    out: list[Trajectory] = []
    for f in _files(Path(path)):
        frame, turns = load_file(f)
        by_id = turns_by_trajectory(turns)
        for row in frame.iter_rows(named=True):
            got = by_id.get(row["id"], [])
            if len(got) != row["n_turns"]:
                raise ValueError(f"{f}: trajectory {row['id']} has {row['n_turns']} turns but its turn table holds {len(got)}")
            out.append(trajectory_from_row(row, got))
    return out


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
